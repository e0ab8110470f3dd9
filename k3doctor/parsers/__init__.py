"""Pure parsers for the tool outputs k3doctor reads (amd-smi, rocm-smi, dmesg, docker,
rccl-tests, torch.distributed logs).

Every parser takes the text a tool printed and returns plain dataclasses/dicts; none does
I/O.  Input that is empty, truncated or not the expected format raises :class:`ParseError`
rather than yielding an empty result a check could mistake for "healthy".  Values the tool
reports as unknown (``N/A``, UINT32_MAX sentinels) become ``None``, never 0.
"""


class ParseError(ValueError):
    """The text is not a complete, recognisable output of the tool it was meant to come from."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
