"""Writes to stdout one WebDataset tar shard of about --gb gigabytes, the
way an image-caption corpus looks: each sample is KEY.bin (--bin-kb of
binary payload, which the loader skips) and KEY.txt (--txt-bytes of text
cut from a file, which it trains on). For showing that a multi-GB piped
stream trains with flat memory:

  gpt train --data 'pipe:python3 bench/gen_stream.py --gb 4' --test-data FILE ...

Only the standard library; nothing is held in memory but one sample."""
import argparse
import io
import sys
import tarfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=4.0)
    ap.add_argument("--bin-kb", type=int, default=1024)
    ap.add_argument("--txt-bytes", type=int, default=4096)
    ap.add_argument("--text", default="data/sherlock-ascii.txt")
    a = ap.parse_args()
    with open(a.text, "rb") as f:
        text = f.read()
    payload = bytes(range(256)) * (a.bin_kb * 4)
    per_sample = len(payload) + a.txt_bytes + 3 * 512
    samples = max(1, int(a.gb * (1 << 30) / per_sample))
    out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.USTAR_FORMAT)
    for i in range(samples):
        key = "sample%08d" % i
        start = (i * a.txt_bytes) % max(1, len(text) - a.txt_bytes)
        for ext, data in (("bin", payload), ("txt", text[start:start + a.txt_bytes])):
            info = tarfile.TarInfo("%s.%s" % (key, ext))
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))
    out.close()


if __name__ == "__main__":
    main()
