"""gui_support: what the GUI-run tests share: a small PNG reader for the after-images (8-bit
RGB or RGBA, not interlaced, as relay-x11shot writes them), pixel checks, and the page the
browser test opens."""
import struct
import zlib


def decode_png(data):
    """(width, height, rows) of an 8-bit RGB/RGBA PNG; rows[y][x] is an (r, g, b) tuple."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def near(rgb, want, tolerance=24):
    return all(abs(a - b) <= tolerance for a, b in zip(rgb, want))


def share(rows, want, box):
    """The share of pixels in box (x0, y0, x1, y1) that are near colour `want`."""
    x0, y0, x1, y1 = box
    hits = total = 0
    for y in range(y0, y1, 4):
        for x in range(x0, x1, 4):
            total += 1
            hits += near(rows[y][x], want)
    return hits / float(total)


def hex_rgb(text):
    return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))


# A page whose colours the test chose: magenta with a big button; a click turns the page cyan.
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>relay gui test</title>
<style>html,body{margin:0;height:100%;background:#d01fd0}
button{position:fixed;left:0;top:0;width:100%;height:100%;border:0;background:#d01fd0;
font-size:40px;color:#ffffff}
body.clicked,body.clicked button{background:#1fd0d0}</style></head>
<body><button id="b" onclick="document.body.className='clicked'">click me</button></body></html>
"""
PAGE_COLOUR = "#d01fd0"
CLICKED_COLOUR = "#1fd0d0"
