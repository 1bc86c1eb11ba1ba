#!/usr/bin/env python3
"""Names the functions a traced call ran, for lld's --symbol-ordering-file.

usage: hot-text.py LINK_MAP OUT TRACE...

LINK_MAP is lld's -Map of the traced binary (linked with --no-demangle, so symbols
appear as the linker sees them); each TRACE is valgrind lackey's
--trace-superblocks=yes log of one call. Every .text input section that holds the
start of an executed superblock is named by its first symbol, in the binary's own
order, so the packaged build lays the warm path out contiguously.
"""
import bisect
import re
import sys

# Columns of lld's map: VMA, LMA, Size, Align, then the name, indented by its kind.
OUTPUT_COLUMN, INPUT_COLUMN = 49, 57


def text_sections(map_path):
    sections, current, out_section = [], None, None
    for line in open(map_path):
        fields = line.split(None, 4)
        if len(fields) < 5 or not re.fullmatch(r"[0-9a-f]+", fields[0]):
            continue
        vma, size, name = int(fields[0], 16), int(fields[2], 16), fields[4].strip()
        column = line.index(fields[4])
        if column <= OUTPUT_COLUMN:
            out_section, current = name, None
        elif column <= INPUT_COLUMN:
            current = [vma, vma + size, out_section, []]
            sections.append(current)
        elif current is not None:
            current[3].append(name)
    return sorted(s for s in sections if s[2] == ".text" and s[1] > s[0])


def main():
    map_path, out_path, *traces = sys.argv[1:]
    sections = text_sections(map_path)
    if not sections or not traces:
        sys.exit("no .text sections in the map, or no traces")
    starts = [s[0] for s in sections]
    run = set()
    for trace in traces:
        for line in open(trace):
            if line.startswith("SB "):
                address = int(line[3:], 16)
                i = bisect.bisect_right(starts, address) - 1
                if i >= 0 and address < sections[i][1]:
                    run.add(i)
    named = [sections[i] for i in sorted(run) if sections[i][3]]
    with open(out_path, "w") as out:
        for section in named:
            out.write(section[3][0] + "\n")
    kib = lambda n: n / 1024
    print(
        f"{len(named)} of {len(sections)} .text sections ran "
        f"({kib(sum(s[1] - s[0] for s in named)):.0f} of "
        f"{kib(sum(s[1] - s[0] for s in sections)):.0f} KiB); "
        f"{len(run) - len(named)} without a symbol were left out",
        file=sys.stderr,
    )


main()
