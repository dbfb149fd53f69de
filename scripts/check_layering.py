#!/usr/bin/env python3
# The build's layering check: a library under src/ may include only its own headers, mla/ (the
# public headers) and those of the libraries below it, as docs/ARCHITECTURE.md draws them (and
# as the libraries link). All share the include root src/, so the compiler cannot refuse an
# upward include; this check does, and the build runs it (target mla_layering_check).
#
#   check_layering.py SOURCE_DIR [STAMP_FILE]
import os
import re
import sys

# library -> the libraries it may include (besides itself and mla/).
BELOW = {
    "core": set(),
    "io": {"core"},
    "kernels": {"core"},
    "cache": {"core"},
    "tokenizer": {"core", "io"},
    "dist": {"core"},
    "model": {"core", "io", "kernels", "cache", "tokenizer", "dist"},
    "sched": {"core", "cache", "model", "tokenizer"},
    "server": {"core", "io", "cache", "model", "sched", "tokenizer"},
    "bench": {"core", "kernels"},
    "api": {"core", "io", "cache", "model", "sched", "tokenizer"},
    "probe": {"core"},
    "tiny": {"core", "io", "model", "tokenizer"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main(argv):
    root = os.path.join(argv[1], "src")
    errors = []
    for lib in sorted(os.listdir(root)):
        if not os.path.isdir(os.path.join(root, lib)):
            continue
        if lib not in BELOW:
            errors.append(f"src/{lib}: a library the layering check does not know; add it to "
                          f"scripts/check_layering.py and docs/ARCHITECTURE.md")
            continue
        allowed = BELOW[lib] | {lib, "mla"}
        for d, _, files in os.walk(os.path.join(root, lib)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(d, name)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in BELOW and m.group(1) not in allowed:
                            rel = os.path.relpath(path, argv[1])
                            errors.append(f"{rel}:{n}: src/{lib} includes {m.group(1)}/, a layer "
                                          f"above it (it may include: {', '.join(sorted(allowed))})")
    for e in errors:
        print("layering: " + e, file=sys.stderr)
    if errors:
        return 1
    if len(argv) > 2:
        with open(argv[2], "w") as f:
            f.write("ok\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
