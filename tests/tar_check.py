"""tests/tar_check.py: Python's side of tests/test_data.c (standard library only).

  python3 tests/tar_check.py make DIR     writes DIR/ustar.tar, pax.tar, gnu.tar with tarfile
  python3 tests/tar_check.py list SHARD   prints SHARD's WebDataset documents, one a line:
                                          KEY SIZE DATA_OFFSET SAMPLE_OFFSET FNV1A64,
                                          then "samples N skipped K"
  python3 tests/tar_check.py members SHARD   prints each member's name and size

The C reader must print the same listing for any archive: tarfile and
webdataset's grouping rule are the reference.
"""
import io
import re
import sys
import tarfile

# webdataset's base_plus_ext: the key is the path up to the first '.' of
# the basename, the extension the rest (compared in lower case).
KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")

# Member names: short, splittable into ustar's prefix and name, a basename
# too long for ustar (pax or GNU long name), samples without text.
NAMES = [
    "s1.json", "s1.txt", "s2.json", "d/s3.TXT", "d/s3.cls",
    "a" * 60 + "/" + "b" * 80 + ".txt",
    "c" * 150 + ".txt",
    "deep/" * 30 + "s5.text",
    "noext", ".hidden.txt", "s6.txt",
]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for c in data:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def content(name):
    """A member's bytes; tests/test_data.c makes the same."""
    return (name + "\n").encode() * 37


def make(directory):
    formats = [("ustar", tarfile.USTAR_FORMAT), ("pax", tarfile.PAX_FORMAT),
               ("gnu", tarfile.GNU_FORMAT)]
    for label, fmt in formats:
        with tarfile.open(f"{directory}/{label}.tar", "w", format=fmt) as t:
            d = tarfile.TarInfo("d")
            d.type = tarfile.DIRTYPE
            t.addfile(d)
            for name in NAMES:
                info = tarfile.TarInfo(name)
                data = content(name)
                info.size = len(data)
                try:
                    t.addfile(info, io.BytesIO(data))
                except ValueError:  # too long for ustar: left out
                    pass
            link = tarfile.TarInfo("s6.lnk.txt")
            link.type = tarfile.SYMTYPE
            link.linkname = "s6.txt"
            t.addfile(link)


def listing(path):
    key, key_off, has_doc, samples, skipped, out = None, 0, False, 0, 0, []
    with tarfile.open(path, "r:") as t:
        for m in t:
            if not m.isreg():
                continue
            match = KEY.match(m.name)
            if not match:
                continue
            k, ext = match.groups()
            if k != key:
                skipped += key is not None and not has_doc
                key, key_off, has_doc = k, m.offset, False
                samples += 1
            if has_doc or ext.lower() not in ("txt", "text"):
                continue
            has_doc = True
            data = t.extractfile(m).read()
            out.append(f"{k} {m.size} {m.offset_data} {key_off} {fnv1a64(data):016x}")
    skipped += key is not None and not has_doc
    for line in out:
        print(line)
    print(f"samples {samples} skipped {skipped}")


def members(path):
    with tarfile.open(path, "r:") as t:
        for m in t:
            print(m.name, m.size)


if __name__ == "__main__":
    {"make": make, "list": listing, "members": members}[sys.argv[1]](sys.argv[2])
