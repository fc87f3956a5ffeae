"""A real RTSP server for the stream tests: GStreamer's RTSP server (Debian's gstreamer1.0-rtsp,
gir1.2-gst-rtsp-server-1.0, python3-gi) serving an H.264 mp4 at rtsp://127.0.0.1:PORT/PATH.

Run by Debian's /usr/bin/python3 (python3-gi is built for it, not for the test venv) as a child of
the test: ``python3 rtsp_server.py --port P [--path /cam]... --file clip.mp4 [--user U --password-env V]``.
Prints ``ready`` on stdout once it listens; SIGTERM stops it. Each client gets its own pipeline,
from the start of the file (`filesrc ! qtdemux ! h264parse config-interval=1 ! rtph264pay`)."""

from __future__ import annotations

import argparse
import os
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", action="append", help="a mount point serving the file (repeatable; /cam)")
    parser.add_argument("--file", required=True)
    parser.add_argument("--user")
    parser.add_argument("--password-env", help="the variable holding the password (not argv: ps shows it)")
    args = parser.parse_args()
    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address("127.0.0.1")
    server.set_service(str(args.port))
    factory = GstRtspServer.RTSPMediaFactory()
    location = args.file.replace("\\", "\\\\").replace('"', '\\"')
    factory.set_launch(
        f'( filesrc location="{location}" ! qtdemux ! h264parse config-interval=1 '
        "! rtph264pay name=pay0 pt=96 )"
    )
    if args.user:
        password = os.environ[args.password_env] if args.password_env else ""
        auth = GstRtspServer.RTSPAuth()
        token = GstRtspServer.RTSPToken()
        token.set_string("media.factory.role", "user")
        auth.add_basic(GstRtspServer.RTSPAuth.make_basic(args.user, password), token)
        server.set_auth(auth)
        permissions = GstRtspServer.RTSPPermissions()
        permissions.add_role_from_structure(
            Gst.Structure.from_string(
                "user, media.factory.access=(boolean)true, media.factory.construct=(boolean)true"
            )[0]
        )
        factory.set_permissions(permissions)
    for path in args.path or ["/cam"]:
        server.get_mount_points().add_factory(path, factory)
    if server.attach(None) == 0:
        print(f"cannot listen on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
        return 1
    loop = GLib.MainLoop()
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGINT, loop.quit)
    print("ready", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
