"""Baseline (sequential, Huffman) JPEG decoding for ImageDecoder, numpy + stdlib only.

Follows the integer pipeline of the IJG reference decoder so results match common
libraries: accurate integer IDCT (13-bit constants, 2 extra bits in pass 1), "fancy"
triangle-filter chroma upsampling for 2x subsampling, and fixed-point YCbCr -> RGB.
Entropy decoding walks the bit stream in Python (inherently sequential); everything
after it is vectorised over all blocks.  Progressive and arithmetic-coded files raise.
"""

from __future__ import annotations

import struct

import numpy as np

from onnxviz.errors import ExecutionError

_ZIGZAG = np.array(
    [0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27,
     20, 13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58,
     59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63],
    dtype=np.int64,
)  # fmt: skip


class _Bits:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos
        self.acc = 0
        self.n = 0

    def bit(self) -> int:
        if self.n == 0:
            byte = self.data[self.pos] if self.pos < len(self.data) else 0
            self.pos += 1
            if byte == 0xFF:
                nxt = self.data[self.pos] if self.pos < len(self.data) else 0
                if nxt == 0:
                    self.pos += 1
                else:  # a marker: feed zeros
                    self.pos -= 1
                    byte = 0
            self.acc = byte
            self.n = 8
        self.n -= 1
        return (self.acc >> self.n) & 1

    def bits(self, count: int) -> int:
        v = 0
        for _ in range(count):
            v = (v << 1) | self.bit()
        return v

    def restart(self) -> None:
        self.n = 0
        while self.pos + 1 < len(self.data) and not (
            self.data[self.pos] == 0xFF and 0xD0 <= self.data[self.pos + 1] <= 0xD7
        ):
            self.pos += 1
        self.pos += 2


def _huffman_table(counts: bytes, symbols: bytes) -> dict[tuple[int, int], int]:
    table = {}
    code = 0
    k = 0
    for length in range(1, 17):
        for _ in range(counts[length - 1]):
            table[(length, code)] = symbols[k]
            k += 1
            code += 1
        code <<= 1
    return table


def _decode_symbol(bits: _Bits, table: dict[tuple[int, int], int]) -> int:
    code = 0
    for length in range(1, 17):
        code = (code << 1) | bits.bit()
        sym = table.get((length, code))
        if sym is not None:
            return sym
    raise ExecutionError("ImageDecoder: corrupt JPEG Huffman data")


def _extend(v: int, size: int) -> int:
    return v - (1 << size) + 1 if size and v < (1 << (size - 1)) else v


_F = {
    "0_298631336": 2446, "0_390180644": 3196, "0_541196100": 4433, "0_765366865": 6270,
    "0_899976223": 7373, "1_175875602": 9633, "1_501321110": 12299, "1_847759065": 15137,
    "1_961570560": 16069, "2_053119869": 16819, "2_562915447": 20995, "3_072711026": 25172,
}  # fmt: skip


def _idct_1d(v: list[np.ndarray]) -> list[np.ndarray]:
    """The accurate integer 1-D IDCT (before descaling), on arrays of any shape."""
    z2, z3 = v[2], v[6]
    z1 = (z2 + z3) * _F["0_541196100"]
    tmp2 = z1 - z3 * _F["1_847759065"]
    tmp3 = z1 + z2 * _F["0_765366865"]
    tmp0 = (v[0] + v[4]) << 13
    tmp1 = (v[0] - v[4]) << 13
    t10, t13, t11, t12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    o0, o1, o2, o3 = v[7], v[5], v[3], v[1]
    z1, z2, z3, z4 = o0 + o3, o1 + o2, o0 + o2, o1 + o3
    z5 = (z3 + z4) * _F["1_175875602"]
    o0 = o0 * _F["0_298631336"]
    o1 = o1 * _F["2_053119869"]
    o2 = o2 * _F["3_072711026"]
    o3 = o3 * _F["1_501321110"]
    z1 = z1 * -_F["0_899976223"]
    z2 = z2 * -_F["2_562915447"]
    z3 = z3 * -_F["1_961570560"] + z5
    z4 = z4 * -_F["0_390180644"] + z5
    o0 = o0 + z1 + z3
    o1 = o1 + z2 + z4
    o2 = o2 + z2 + z3
    o3 = o3 + z1 + z4
    return [t10 + o3, t11 + o2, t12 + o1, t13 + o0, t13 - o0, t12 - o1, t11 - o2, t10 - o3]


def _idct_blocks(coef: np.ndarray) -> np.ndarray:
    """(B, 8, 8) dequantized coefficients -> (B, 8, 8) uint8 samples."""
    c = coef.astype(np.int64)
    cols = _idct_1d([c[:, k, :] for k in range(8)])  # pass 1 over columns
    ws = np.stack([(x + (1 << 10)) >> 11 for x in cols], axis=1)  # descale by 13 - 2
    rows = _idct_1d([ws[:, :, k] for k in range(8)])  # pass 2 over rows
    out = np.stack([(x + (1 << 17)) >> 18 for x in rows], axis=2) + 128  # 13 + 2 + 3
    return np.clip(out, 0, 255).astype(np.uint8)


def _fancy_h2v2(plane: np.ndarray) -> np.ndarray:
    """Triangle-filter 2x upsampling in both directions (IJG h2v2 'fancy')."""
    p = plane.astype(np.int32)
    above = np.concatenate([p[:1], p[:-1]], axis=0)
    below = np.concatenate([p[1:], p[-1:]], axis=0)
    rows = np.empty((2 * p.shape[0], p.shape[1]), dtype=np.int32)
    rows[0::2] = p * 3 + above
    rows[1::2] = p * 3 + below
    return _fancy_h2(rows, vertical=True)


def _fancy_h2(colsum: np.ndarray, vertical: bool) -> np.ndarray:
    """Horizontal 2x triangle filter on column sums (scaled by 4 when vertical)."""
    if vertical:
        left = np.concatenate([colsum[:, :1], colsum[:, :-1]], axis=1)
        right = np.concatenate([colsum[:, 1:], colsum[:, -1:]], axis=1)
        out = np.empty((colsum.shape[0], 2 * colsum.shape[1]), dtype=np.int32)
        out[:, 0::2] = (colsum * 3 + left + 8) >> 4
        out[:, 1::2] = (colsum * 3 + right + 7) >> 4
        out[:, 0] = (colsum[:, 0] * 4 + 8) >> 4
        out[:, -1] = (colsum[:, -1] * 4 + 7) >> 4
        return out
    left = np.concatenate([colsum[:, :1], colsum[:, :-1]], axis=1)
    right = np.concatenate([colsum[:, 1:], colsum[:, -1:]], axis=1)
    out = np.empty((colsum.shape[0], 2 * colsum.shape[1]), dtype=np.int32)
    out[:, 0::2] = (colsum * 3 + left + 1) >> 2
    out[:, 1::2] = (colsum * 3 + right + 2) >> 2
    out[:, 0] = colsum[:, 0]
    out[:, -1] = colsum[:, -1]
    return out


def _ycc_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    one_half = 1 << 15
    yi = y.astype(np.int64)
    cbx = cb.astype(np.int64) - 128
    crx = cr.astype(np.int64) - 128
    r = yi + ((91881 * crx + one_half) >> 16)
    b = yi + ((116130 * cbx + one_half) >> 16)
    g = yi + ((-46802 * crx - 22554 * cbx + one_half) >> 16)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def decode_jpeg(data: bytes) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a baseline JPEG."""
    pos = 2
    qt: dict[int, np.ndarray] = {}
    huff: dict[tuple[int, int], dict[tuple[int, int], int]] = {}
    comps: list[dict[str, int]] = []
    width = height = restart = 0
    while pos < len(data):
        if data[pos] != 0xFF:
            pos += 1
            continue
        marker = data[pos + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        seg = data[pos + 4 : pos + 2 + length]
        if marker == 0xDB:
            k = 0
            while k < len(seg):
                precision, tid = seg[k] >> 4, seg[k] & 15
                size = 128 if precision else 64
                dtype = ">u2" if precision else "u1"
                values = np.frombuffer(seg[k + 1 : k + 1 + size], dtype=dtype).astype(np.int64)
                table = np.zeros(64, dtype=np.int64)
                table[_ZIGZAG] = values
                qt[tid] = table.reshape(8, 8)
                k += 1 + size
        elif marker == 0xC4:
            k = 0
            while k < len(seg):
                cls, tid = seg[k] >> 4, seg[k] & 15
                counts = seg[k + 1 : k + 17]
                total = sum(counts)
                huff[(cls, tid)] = _huffman_table(counts, seg[k + 17 : k + 17 + total])
                k += 17 + total
        elif marker in (0xC0, 0xC1):
            height, width = struct.unpack(">HH", seg[1:5])
            for i in range(seg[5]):
                cid, samp, tq = seg[6 + 3 * i], seg[7 + 3 * i], seg[8 + 3 * i]
                comps.append({"id": cid, "h": samp >> 4, "v": samp & 15, "tq": tq})
        elif 0xC2 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            raise ExecutionError("ImageDecoder: progressive/arithmetic JPEG is not supported")
        elif marker == 0xDD:
            (restart,) = struct.unpack(">H", seg[:2])
        elif marker == 0xDA:
            return _decode_scan(
                data, pos + 2 + length, seg, comps, qt, huff, width, height, restart
            )
        pos += 2 + length
    raise ExecutionError("ImageDecoder: JPEG without a scan")


def _decode_scan(
    data: bytes,
    start: int,
    header: bytes,
    comps: list[dict[str, int]],
    qt: dict[int, np.ndarray],
    huff: dict[tuple[int, int], dict[tuple[int, int], int]],
    width: int,
    height: int,
    restart: int,
) -> np.ndarray:
    tables = {header[1 + 2 * i]: header[2 + 2 * i] for i in range(header[0])}
    hmax = max(c["h"] for c in comps)
    vmax = max(c["v"] for c in comps)
    mcux = -(-width // (8 * hmax))
    mcuy = -(-height // (8 * vmax))
    blocks = [np.zeros((mcuy * c["v"], mcux * c["h"], 64), dtype=np.int64) for c in comps]
    bits = _Bits(data, start)
    preds = [0] * len(comps)
    for m in range(mcux * mcuy):
        if restart and m and m % restart == 0:
            bits.restart()
            preds = [0] * len(comps)
        my, mx = divmod(m, mcux)
        for ci, comp in enumerate(comps):
            sel = tables[comp["id"]]
            dc_t, ac_t = huff[(0, sel >> 4)], huff[(1, sel & 15)]
            for by in range(comp["v"]):
                for bx in range(comp["h"]):
                    zz = np.zeros(64, dtype=np.int64)
                    size = _decode_symbol(bits, dc_t)
                    preds[ci] += _extend(bits.bits(size), size)
                    zz[0] = preds[ci]
                    k = 1
                    while k < 64:
                        sym = _decode_symbol(bits, ac_t)
                        run, size = sym >> 4, sym & 15
                        if size == 0:
                            if run != 15:
                                break
                            k += 16
                            continue
                        k += run
                        zz[k] = _extend(bits.bits(size), size)
                        k += 1
                    blocks[ci][my * comp["v"] + by, mx * comp["h"] + bx, _ZIGZAG] = zz
    planes = []
    for ci, comp in enumerate(comps):
        b = blocks[ci]
        rows, cols = b.shape[:2]
        samples = _idct_blocks(b.reshape(-1, 8, 8) * qt[comp["tq"]])
        plane = samples.reshape(rows, cols, 8, 8).transpose(0, 2, 1, 3).reshape(rows * 8, cols * 8)
        # Crop to this component's share of the image before upsampling, as IJG does.
        ph = -(-height * comp["v"] // vmax)
        pw = -(-width * comp["h"] // hmax)
        plane = plane[:ph, :pw]
        if comp["h"] == hmax and comp["v"] == vmax:
            planes.append(plane.astype(np.int32))
        elif hmax == 2 * comp["h"] and vmax == 2 * comp["v"]:
            planes.append(_fancy_h2v2(plane))
        elif hmax == 2 * comp["h"] and vmax == comp["v"]:
            planes.append(_fancy_h2(plane.astype(np.int32), vertical=False))
        else:
            ry, rx = vmax // comp["v"], hmax // comp["h"]
            planes.append(np.repeat(np.repeat(plane, ry, axis=0), rx, axis=1).astype(np.int32))
    planes = [p[:height, :width] for p in planes]
    if len(planes) == 1:
        return np.repeat(np.clip(planes[0], 0, 255).astype(np.uint8)[..., None], 3, axis=2)
    if len(planes) != 3:
        raise ExecutionError(f"ImageDecoder: JPEG with {len(planes)} components is not supported")
    return _ycc_to_rgb(planes[0], planes[1], planes[2])
