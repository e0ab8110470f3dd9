"""A channel to a unix socket on the node, opened by its sshd: OpenSSH's ``direct-streamlocal@openssh.com``.

sshd connects to the socket as the login user and relays the bytes; nothing is started on the node (the
Docker API needs no ``docker system dial-stdio`` there). The channel type is an OpenSSH extension (its
PROTOCOL file, section 2.4) that paramiko has no public call for, so ``open_streamlocal`` opens it with
paramiko's Transport internals exactly as ``Transport.open_channel`` does for ``direct-tcpip``. Tested with
paramiko 3.0.0 (setup.cfg's floor) and 5.1.0 against OpenSSH 9.2 sshd; the internals used (``lock``,
``_next_channel``, ``_channels``, ``channel_events``, ``channels_seen``, ``Channel._set_transport`` and
``_set_window``, ``_send_user_message``) have kept this shape since paramiko 1.15.
"""
from __future__ import annotations

import threading
import time

import paramiko  # imported for real at the first use (k3doctor/transport/lazy_imports.py): not at the CLI's start

KIND = "direct-streamlocal@openssh.com"


def open_message(chanid: int, window_size: int, max_packet_size: int, socket_path: str) -> paramiko.Message:
    """SSH_MSG_CHANNEL_OPEN for ``socket_path``: PROTOCOL 2.4 ``string socket path, string reserved,
    uint32 reserved`` after the common channel-open fields."""
    m = paramiko.Message()
    m.add_byte(paramiko.common.cMSG_CHANNEL_OPEN)
    m.add_string(KIND)
    m.add_int(chanid)
    m.add_int(window_size)
    m.add_int(max_packet_size)
    m.add_string(socket_path)
    m.add_string("")
    m.add_int(0)
    return m


def open_streamlocal(transport: paramiko.Transport, socket_path: str, timeout_s: float) -> paramiko.Channel:
    """A channel to ``socket_path`` on the node, open within ``timeout_s``. Raises paramiko.ChannelException
    when sshd refuses it: OpenSSH 9.2 answers every refusal alike (forwarding disabled, no such socket, nobody
    listening, not permitted for the login user: "Connect failed", the cause only in its own log);
    SSHException when the connection is gone or the node does not answer in time."""
    if not transport.active:
        raise paramiko.SSHException("SSH session not active")
    with transport.lock:
        window_size = transport._sanitize_window_size(None)
        max_packet_size = transport._sanitize_packet_size(None)
        chanid = transport._next_channel()
        chan = paramiko.Channel(chanid)
        transport._channels.put(chanid, chan)
        transport.channel_events[chanid] = event = threading.Event()
        transport.channels_seen[chanid] = True
        chan._set_transport(transport)
        chan._set_window(window_size, max_packet_size)
    transport._send_user_message(open_message(chanid, window_size, max_packet_size, socket_path))
    end = time.monotonic() + timeout_s
    while not event.wait(0.1):
        if not transport.active:
            raise transport.get_exception() or paramiko.SSHException("SSH session lost while opening a channel")
        if time.monotonic() > end:
            chan.close()
            raise paramiko.SSHException(f"no answer to opening a channel to {socket_path} within {timeout_s:g}s")
    opened = transport._channels.get(chanid)
    if opened is None:  # refused: paramiko dropped the channel and kept the server's reason
        raise transport.get_exception() or paramiko.SSHException("channel open failed")
    return opened
