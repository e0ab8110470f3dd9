"""``k3doctor readings kept FILE`` and ``readings redact FILE -o OUT``: what a saved readings file holds, and a
copy of a ``--keep-identifiers`` file that can be shared (k3doctor/gather/shareable.py)."""
from __future__ import annotations

import click

from k3doctor.cli.options import bad_input, load_plugins
from k3doctor.outputs import OutputPath, write_output


@click.group("readings")
def readings_group():
    """What a `check --save-readings` file keeps, and a shareable copy of one."""


def _document(path: str) -> dict:
    """The saved readings document at ``path`` (checked as `judge` checks it), or one line and exit 3."""
    from k3doctor import localfiles
    from k3doctor.gather import snapshot

    load_plugins()  # the saved inventory names the checks' parameters
    try:
        snapshot.load_file(path)  # refused as `judge` refuses it
        return snapshot.strict_json(localfiles.read_text(path))
    except snapshot.SnapshotError as exc:
        bad_input(f"cannot read {path}: {exc}")


@readings_group.command("kept")
@click.argument("readings_file", type=click.Path(exists=True, dir_okay=False))
def kept_cmd(readings_file):
    """Say what FILE keeps: identifiers replaced or as read, what stays, what never leaves a node."""
    from k3doctor.gather import shareable

    for line in shareable.describe(_document(readings_file)):
        click.echo(line)


@readings_group.command("redact")
@click.argument("readings_file", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=OutputPath(stdout=False), required=True,
              help="The shareable copy to write (0600; FILE itself is left as it is).")
def redact_cmd(readings_file, output):
    """Write a copy of FILE with its host names, addresses, serials and user names replaced by pseudonyms."""
    import json

    from k3doctor.gather import shareable, snapshot

    doc = _document(readings_file)
    if isinstance(doc.get("identifiers"), dict):
        bad_input(f"{readings_file} holds pseudonyms already (`k3doctor readings kept {readings_file}`)")
    shared = snapshot.identifiers({k: v for k, v in doc.items() if k != "identifiers"}, keep=False)
    write_output(output, json.dumps(shared), private=True)
    click.echo(f"{output}: {shareable.summary(shared)}")


COMMANDS = (readings_group,)
