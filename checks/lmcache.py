"""LMCache's native ops load in the engine's container before an offload launch (reference §29, §25, §30).

PyPI ``lmcache==0.5.2`` is a CUDA build: on ROCm it only warns ``LMCache WARNING: Failed to import backend
lmcache.c_ops: libcudart.so.13: cannot open shared object file`` and the offload tier then has no native ops
(vllm-project/vllm #50953); the fix is LMCache's ROCm build (``v0.5.3rc2-rocm`` + ``cupy-rocm-7-0``, vLLM
PR #51004). So with LMCache offload in the launch (``--kv-transfer-config`` naming an LMCache connector, or an
``LMCACHE_*`` variable in the container), ``python -c 'import lmcache.c_ops'`` must succeed in the container.
The probe imports ``lmcache.c_ops`` only where the ``lmcache`` package is installed (looked up without
importing it), so a container without LMCache costs one python start.
"""
from __future__ import annotations

from k3doctor.api import ContainerInspect, ParseError, check, error, fail, in_container, passed, remediation
from k3doctor.views.container import ContainerView, launch_options

CHECK = "lmcache-ops"
# One line: "@absent" (no lmcache package), "@ok <file>", "@failed <exception: message>" or "@nopython".
_PROBE = r"""py=$(command -v python3 || command -v python) || { echo @nopython; exit 0; }
exec "$py" -c 'import importlib.util as u
if u.find_spec("lmcache") is None:
    print("@absent")
else:
    try:
        import lmcache.c_ops as c
        print("@ok", getattr(c, "__file__", "?"))
    except BaseException as e:
        print("@failed", (type(e).__name__ + ": " + str(e)).replace("\n", " ")[:300])'"""

NO_OPS = remediation("LMCACHE-NO-NATIVE-OPS", "LMCache offload is on but lmcache.c_ops does not load", """
With LMCache offload in the launch, `python -c 'import lmcache.c_ops'` must succeed in the engine's container
(§29). PyPI's lmcache (0.5.2) is built for CUDA: on ROCm its ops fail on `libcudart.so.13` and LMCache only
warns, so the offload tier runs without them (vllm-project/vllm #50953). Install LMCache's ROCm build
(`v0.5.3rc2-rocm` with `cupy-rocm-7-0`, as vLLM PR #51004 does) in the image, or launch without offload.
""")


def _reads(settings) -> dict:
    return {"container": ContainerInspect(settings.container, keep=()),
            "ops": in_container(settings.container, "sh", "-c", _PROBE)}


def offload_asked(container: ContainerView) -> str | None:
    """Why the launch uses LMCache offload (its --kv-transfer-config in any spelling the engine takes, see
    launch_options; or an LMCACHE_* variable), else None."""
    config = str(launch_options(container.launch).get("--kv-transfer-config") or "")
    if "lmcache" in config.lower():  # only that: its extra config may carry URLs or credentials
        return "--kv-transfer-config names an LMCache connector"
    named = sorted(n for n in container.env if n.startswith("LMCACHE_"))
    return f"{', '.join(named[:3])} set in the container" if named else None


def parse_probe(text: str) -> tuple:
    """(outcome: ok | absent | failed | nopython, detail) from the probe's one line (what an import printed
    besides it is not the probe's); else ParseError. The line is found by its first word, so the word is what
    it says, whatever blank surrounds it: a parser returns what the probe said or raises, never a FAIL quoting
    "@ok"."""
    lines = [ln.split(None, 1) for ln in text.splitlines()]
    lines = [words for words in lines if words and words[0] in ("@ok", "@absent", "@failed", "@nopython")]
    if len(lines) != 1:
        raise ParseError(f"LMCache probe: expected one @ok/@absent/@failed/@nopython line, got {text[:120]!r}")
    word, detail = lines[0][0], lines[0][1] if len(lines[0]) > 1 else ""
    return word[1:], detail.strip()


@check(CHECK, title="LMCache's native ops import in the container when the launch offloads to LMCache (§29)",
       scope="node", reads=_reads, remediation=NO_OPS)
def lmcache_ops(r, ctx):
    """§29: an offload launch on LMCache's CUDA wheel runs without native ops after one WARNING line: BLOCK."""
    record = r["container"].record
    if record is None:
        return passed(f"no container {ctx.settings.container}: nothing to judge (launch-config names it)")
    container = ContainerView.from_record(record)
    why = offload_asked(container)
    if why is not None and not container.running:
        return passed(f"LMCache offload ({why}), container {container.name} not running: not probed "
                      "(launch-config names it)")
    if why is None:
        return passed("no LMCache offload in the launch: lmcache.c_ops not needed")
    outcome, detail = parse_probe(r["ops"].output("the lmcache.c_ops import"))
    evidence = {"offload": why, "import lmcache.c_ops": f"{outcome} {detail}".strip()}
    if outcome == "ok":
        return passed(f"LMCache offload ({why}) and `import lmcache.c_ops` succeeds ({detail})", evidence=evidence)
    if outcome == "nopython":
        return error(f"LMCache offload ({why}) but no python in the container to import lmcache.c_ops with",
                     evidence=evidence)
    said = "the lmcache package is not installed" if outcome == "absent" else f"it fails: {detail}"
    return fail(f"LMCache offload ({why}) but `import lmcache.c_ops` in the container: {said} - the offload tier "
                "would run without LMCache's native ops (§29)", remediation=NO_OPS, evidence=evidence)
