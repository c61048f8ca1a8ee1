#!/usr/bin/env python3
"""Checks every C++20 coroutine frame GCC laid out in a binary: the resume
pointer must come first, as the coroutine ABI (and coroutine_handle) assumes.

GCC 12 (Debian 12's compiler) breaks this for some coroutines whose if
conditions hold a co_await: it puts its condition flags (__ifcd_N) ahead
of _Coro_resume_fn, every field after them moves, and the coroutine's first
resume runs with a wrong `this` (a crash, or worse, a write into someone
else's memory). Which shapes trigger it is not simple to say, so the binary
is checked instead: the frames' types are in the debug information.

    python3 tests/frame_layout.py build/levee [more binaries]

Exits 1 naming each frame whose first field is something else, or when a
binary holds no frame types at all (built without -g: nothing was checked).
"""
import re
import subprocess
import sys

DIE = re.compile(r"^\s*<(\d+)><[0-9a-f]+>: Abbrev Number: \d+ \((DW_TAG_\w+)\)")
NAME = re.compile(r"DW_AT_name\s*:\s*(?:\(.*?\):\s*)?(.*)$")


def frames(binary):
    """Yields (frame type, name of its first member)."""
    out = subprocess.Popen(["readelf", "--debug-dump=info", "--wide", binary], stdout=subprocess.PIPE,
                           text=True, errors="replace")
    frame, frame_depth, want = None, None, None  # want: "struct name", then "first member"
    for line in out.stdout:
        m = DIE.match(line)
        if m:
            depth, tag = int(m.group(1)), m.group(2)
            if want == "member name":  # the first member had no name
                yield frame, "(anonymous)"
                want = None
            if tag == "DW_TAG_structure_type":
                frame, frame_depth, want = None, depth, "struct name"
            elif tag == "DW_TAG_member" and frame is not None and want == "first member" and depth == frame_depth + 1:
                want = "member name"
            elif want == "first member" and depth <= frame_depth:
                yield frame, "(no members)"
                frame, want = None, None
            elif want == "struct name":
                want = None
            continue
        n = NAME.search(line)
        if not n:
            continue
        if want == "struct name":
            name = n.group(1).strip()
            if name.endswith(".Frame"):
                frame, want = name, "first member"
            else:
                want = None
        elif want == "member name":
            yield frame, n.group(1).strip()
            frame, want = None, None
    if out.wait() != 0:
        raise SystemExit(f"readelf failed on {binary}")


def main():
    bad, status = [], 0
    for binary in sys.argv[1:]:
        seen = {}
        for frame, first in frames(binary):
            # A frame type can be described in several compilation units:
            # one bad description is enough.
            if seen.get(frame, "_Coro_resume_fn") == "_Coro_resume_fn":
                seen[frame] = first
        wrong = {f: m for f, m in seen.items() if m != "_Coro_resume_fn"}
        print(f"{binary}: {len(seen)} coroutine frames, {len(wrong)} with a field ahead of the resume pointer")
        if not seen:
            print(f"  no frame types in {binary}: built without debug information?")
            status = 1
        for f, m in sorted(wrong.items()):
            print(f"  {f}: first field {m}")
            bad.append(f)
    if bad:
        print("Rewrite those coroutines with each co_await outside if conditions "
              "(bool ok = co_await ...; if (!ok) ...).")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
