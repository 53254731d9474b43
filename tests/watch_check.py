"""Independent readers for what a run leaves to watch it by (watch.c).

  watch_check.py events EVENTFILE METRICS.jsonl
      Reads every TFRecord, checks both masked CRC-32Cs, parses each Event
      with python3-protobuf from message definitions built here (not from
      our writer's code), and checks every train/loss and test/loss scalar
      against the run log. Prints "ok: N records, K train, M test".
  watch_check.py png FILE.png
      Decodes a PNG (8-bit RGB or RGBA, as rsvg-convert writes) and prints
      how many pixels are the train curve's blue and the test curve's red.
"""
import json
import struct
import sys
import zlib


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf import message_factory
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="event_check.proto", package="check")

    def message(name, fields):
        m = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("Value", [("tag", 1, F.TYPE_STRING, opt, None),
                      ("simple_value", 2, F.TYPE_FLOAT, opt, None)])
    message("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".check.Value")])
    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None),
                      ("step", 2, F.TYPE_INT64, opt, None),
                      ("file_version", 3, F.TYPE_STRING, opt, None),
                      ("summary", 5, F.TYPE_MESSAGE, opt, ".check.Summary")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("check.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_events(path, log):
    Event = event_class()
    data = open(path, "rb").read()
    pos, events = 0, []
    while pos < len(data):
        if len(data) - pos < 12:
            sys.exit(f"{path}: a torn record header at offset {pos}")
        head = data[pos:pos + 8]
        (n,) = struct.unpack("<Q", head)
        (c1,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if c1 != masked(head):
            sys.exit(f"{path}: bad length CRC at offset {pos}")
        body = data[pos + 12:pos + 12 + n]
        (c2,) = struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])
        if len(body) != n or c2 != masked(body):
            sys.exit(f"{path}: bad data CRC at offset {pos}")
        e = Event()
        e.ParseFromString(body)
        events.append(e)
        pos += 16 + n
    if not events or events[0].file_version != "brain.Event:2":
        sys.exit(f"{path}: the first event is not the file version")
    want_train, want_test = {}, {}
    for line in open(log):
        r = json.loads(line)
        if r["kind"] == "step":
            want_train[r["step"]] = f32(r["loss"])
        elif r["kind"] == "eval":
            want_test[r["step"]] = f32(r["test_loss"])
    got = {"train/loss": {}, "test/loss": {}}
    for e in events[1:]:
        for v in e.summary.value:
            if v.tag in got:
                got[v.tag][e.step] = v.simple_value
    if got["train/loss"] != want_train:
        sys.exit(f"{path}: train/loss differs from {log}")
    if got["test/loss"] != want_test:
        sys.exit(f"{path}: test/loss differs from {log}")
    print(f"ok: {len(events)} records, {len(want_train)} train, {len(want_test)} test")


def png_pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                sys.exit(f"{path}: only 8-bit RGB(A), not interlaced")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(height):
        ftype, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    near = lambda px, col: all(abs(px[k] - col[k]) <= 40 for k in range(3))
    blue, red = (0x1F, 0x77, 0xB4), (0xD6, 0x27, 0x28)
    nb = nr = 0
    for y, line in enumerate(rows):
        if y < 30:  # the legend
            continue
        for x in range(width):
            px = line[x * bpp:x * bpp + 3]
            nb += near(px, blue)
            nr += near(px, red)
    print(f"blue {nb} red {nr}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "events":
        check_events(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "png":
        png_pixels(sys.argv[2])
    else:
        sys.exit(__doc__)
