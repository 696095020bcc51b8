"""ImageDecoder (opset 20) for the formats decodable with the standard library alone:
PNG (zlib), BMP (uncompressed 24/32-bit), PNM (P2/P3/P5/P6), uncompressed TIFF and
baseline JPEG (nn_jpeg).

Progressive JPEG, JPEG 2000, compressed TIFF and WebP need real codecs; image libraries are not runtime
dependencies, so those raise a clear ExecutionError instead of guessing.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.nn_jpeg import decode_jpeg
from onnxviz.runtime.registry import kernel


def _paeth_row(filt: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    """Paeth reconstruction depends on the previous pixel of the same row: sequential."""
    out = np.zeros(filt.size, dtype=np.int32)
    f = filt.astype(np.int32)
    b_row = prev.astype(np.int32)
    for i in range(filt.size):
        a = out[i - bpp] if i >= bpp else 0
        b = b_row[i]
        c = b_row[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        out[i] = (f[i] + pred) & 0xFF
    return out.astype(np.uint8)


def _average_row(filt: np.ndarray, prev: np.ndarray, bpp: int) -> np.ndarray:
    out = np.zeros(filt.size, dtype=np.int32)
    f = filt.astype(np.int32)
    up = prev.astype(np.int32)
    for i in range(filt.size):
        left = out[i - bpp] if i >= bpp else 0
        out[i] = (f[i] + ((left + up[i]) >> 1)) & 0xFF
    return out.astype(np.uint8)


def _decode_png(data: bytes) -> np.ndarray:
    pos = 8
    idat = b""
    palette = None
    width = height = depth = color = interlace = 0
    while pos + 8 <= len(data):
        length, ctype = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if ctype == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif ctype == b"PLTE":
            palette = np.frombuffer(body, dtype=np.uint8).reshape(-1, 3)
        elif ctype == b"IDAT":
            idat += body
        elif ctype == b"IEND":
            break
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color)
    if channels is None or depth not in (8, 16) and not (color == 3 and depth == 8):
        raise ExecutionError(
            f"ImageDecoder: PNG color type {color} / bit depth {depth} unsupported"
        )
    if interlace:
        raise ExecutionError("ImageDecoder: interlaced PNG is not supported")
    bpp = channels * depth // 8
    stride = width * bpp
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8)
    rows = raw[: height * (stride + 1)].reshape(height, stride + 1)
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind, filt = rows[y, 0], rows[y, 1:]
        if kind == 0:
            row = filt.copy()
        elif kind == 1:
            row = (
                (np.cumsum(filt.reshape(-1, bpp).astype(np.int64), axis=0) & 0xFF)
                .reshape(-1)
                .astype(np.uint8)
            )
        elif kind == 2:
            row = (filt.astype(np.int32) + prev).astype(np.uint8)
        elif kind == 3:
            row = _average_row(filt, prev, bpp)
        elif kind == 4:
            row = _paeth_row(filt, prev, bpp)
        else:
            raise ExecutionError(f"ImageDecoder: bad PNG filter type {kind}")
        out[y] = row
        prev = row
    pixels = out.reshape(height, width, bpp)
    if depth == 16:
        pixels = pixels.reshape(height, width, channels, 2)[..., 0]  # high byte
    if color == 3:
        if palette is None:
            raise ExecutionError("ImageDecoder: paletted PNG without PLTE")
        return palette[pixels[..., 0]]
    if color in (0, 4):
        return np.repeat(pixels[..., :1], 3, axis=2)
    return pixels[..., :3]


def _decode_bmp(data: bytes) -> np.ndarray:
    offset = struct.unpack("<I", data[10:14])[0]
    width, height = struct.unpack("<ii", data[18:26])
    bits, compression = struct.unpack("<HI", data[28:34])
    if bits not in (24, 32) or compression not in (0, 3):
        raise ExecutionError(
            f"ImageDecoder: BMP with {bits} bits / compression {compression} unsupported"
        )
    bpp = bits // 8
    stride = (width * bpp + 3) // 4 * 4
    rows = abs(height)
    raw = np.frombuffer(data, dtype=np.uint8, count=stride * rows, offset=offset)
    pixels = raw.reshape(rows, stride)[:, : width * bpp].reshape(rows, width, bpp)
    if height > 0:  # bottom-up rows
        pixels = pixels[::-1]
    return pixels[..., 2::-1].copy()  # BGR(A) -> RGB


def _decode_pnm(data: bytes) -> np.ndarray:
    tokens: list[bytes] = []
    pos = 0
    while len(tokens) < 4:
        while pos < len(data) and data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            while pos < len(data) and data[pos : pos + 1] not in (b"\n", b"\r"):
                pos += 1
            continue
        start = pos
        while pos < len(data) and not data[pos : pos + 1].isspace():
            pos += 1
        tokens.append(data[start:pos])
    magic, width, height, maxval = tokens[0], int(tokens[1]), int(tokens[2]), int(tokens[3])
    channels = 3 if magic in (b"P3", b"P6") else 1
    count = width * height * channels
    if magic in (b"P5", b"P6"):
        if maxval > 255:
            raise ExecutionError("ImageDecoder: 16-bit PNM is not supported")
        values = np.frombuffer(data, dtype=np.uint8, count=count, offset=pos + 1)
    elif magic in (b"P2", b"P3"):
        values = np.array(data[pos:].split()[:count], dtype=np.int64)
    else:
        raise ExecutionError(f"ImageDecoder: PNM kind {magic!r} is not supported")
    scaled = (values.astype(np.int64) * 255 + maxval // 2) // maxval if maxval != 255 else values
    img = np.asarray(scaled, dtype=np.uint8).reshape(height, width, channels)
    return np.repeat(img, 3, axis=2) if channels == 1 else img


def _tiff_tags(data: bytes) -> dict[int, list[int]]:
    """Tags of the first IFD: tag -> its SHORT/LONG values."""
    order = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", data[4:8])
    (count,) = struct.unpack(order + "H", data[ifd : ifd + 2])
    tags: dict[int, list[int]] = {}
    sizes = {1: ("B", 1), 3: ("H", 2), 4: ("I", 4)}
    for k in range(count):
        entry = data[ifd + 2 + 12 * k : ifd + 14 + 12 * k]
        tag, kind, n = struct.unpack(order + "HHI", entry[:8])
        if kind not in sizes:
            continue
        code, size = sizes[kind]
        raw = entry[8:12] if n * size <= 4 else data[struct.unpack(order + "I", entry[8:12])[0] :]
        tags[tag] = list(struct.unpack(order + code * n, raw[: n * size]))
    return tags


def _decode_tiff(data: bytes) -> np.ndarray:
    """Baseline uncompressed 8-bit TIFF (RGB or grayscale, chunky, strips)."""
    tags = _tiff_tags(data)
    width, height = tags[256][0], tags[257][0]
    bits = tags.get(258, [1])
    compression = tags.get(259, [1])[0]
    photometric = tags.get(262, [2])[0]
    channels = tags.get(277, [1])[0]
    if compression != 1 or any(b != 8 for b in bits) or tags.get(284, [1])[0] != 1:
        raise ExecutionError("ImageDecoder: only uncompressed 8-bit chunky TIFF is supported")
    strips = b"".join(
        data[o : o + c] for o, c in zip(tags[273], tags.get(279, [width * height * channels]))
    )
    pixels = np.frombuffer(strips, dtype=np.uint8, count=width * height * channels)
    img = pixels.reshape(height, width, channels)
    if photometric in (0, 1):  # grayscale (0 = white is zero)
        gray = img[..., :1] if photometric == 1 else 255 - img[..., :1]
        return np.repeat(gray, 3, axis=2)
    if photometric != 2 or channels < 3:
        raise ExecutionError(f"ImageDecoder: TIFF photometric {photometric} is not supported")
    return img[..., :3].copy()


def _format_of(data: bytes) -> str:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"BM"):
        return "bmp"
    if data[:2] in (b"P2", b"P3", b"P5", b"P6"):
        return "pnm"
    if data.startswith(b"\xff\xd8"):
        return "jpeg"
    if data.startswith(b"\x00\x00\x00\x0cjP  ") or data.startswith(b"\xff\x4f\xff\x51"):
        return "jpeg2000"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "webp"
    return "unknown"


@kernel("ImageDecoder", since=20)
def image_decoder(encoded: np.ndarray, *, pixel_format: str = "RGB") -> np.ndarray:
    data = np.ascontiguousarray(encoded, dtype=np.uint8).tobytes()
    kind = _format_of(data)
    decoders = {
        "png": _decode_png,
        "bmp": _decode_bmp,
        "pnm": _decode_pnm,
        "tiff": _decode_tiff,
        "jpeg": decode_jpeg,
    }
    if kind not in decoders:
        raise ExecutionError(
            f"ImageDecoder: {kind} images need a codec library, which onnxviz does not ship"
        )
    rgb = decoders[kind](data)
    if pixel_format == "RGB":
        return np.ascontiguousarray(rgb)
    if pixel_format == "BGR":
        return np.ascontiguousarray(rgb[..., ::-1])
    if pixel_format == "Grayscale":
        # ITU-R 601-2 luma in 16-bit fixed point, rounded.
        r, g, b = (rgb[..., i].astype(np.uint32) for i in range(3))
        luma = (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16
        return luma.astype(np.uint8)[..., None]
    raise ExecutionError(f"ImageDecoder: unknown pixel_format '{pixel_format}'")
