"""Detection helpers: RoiAlign (10, 16, 22), MaxRoiPool (1, 22), NonMaxSuppression (10, 11).

Region ops loop over regions (few) and vectorise inside each one; NonMaxSuppression is a
greedy selection per (batch, class) with vectorised IoU against all remaining boxes.
"""

from __future__ import annotations

import numpy as np

from onnxviz.errors import ExecutionError
from onnxviz.runtime.kernels.nn_geometry import compute_dtype
from onnxviz.runtime.registry import KernelContext, kernel


def _bilinear_axis(
    coord: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Low/high indices and weights of sample coordinates on one axis, plus validity."""
    valid = (coord >= -1.0) & (coord <= size)
    c = np.maximum(coord, 0)
    low = np.floor(c).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    c = np.where(at_end, low, c)
    frac = c - low
    return low, high, 1 - frac, frac, valid


@kernel("RoiAlign", since=(10, 16, 22), ctx=True)
def roi_align(
    ctx: KernelContext,
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    coordinate_transformation_mode: str = "half_pixel",
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    if mode not in ("avg", "max"):
        raise ExecutionError(f"RoiAlign: unknown mode '{mode}'")
    if ctx.opset < 16:
        coordinate_transformation_mode = "output_half_pixel"
    if coordinate_transformation_mode not in ("half_pixel", "output_half_pixel"):
        raise ExecutionError(
            f"RoiAlign: unknown coordinate_transformation_mode '{coordinate_transformation_mode}'"
        )
    dt = compute_dtype(x.dtype)
    xc = x.astype(dt, copy=False)
    _, c, height, width = x.shape
    num = rois.shape[0]
    out = np.zeros((num, c, output_height, output_width), dtype=dt)
    offset = 0.5 if coordinate_transformation_mode == "half_pixel" else 0.0
    boxes = rois.astype(np.float64) * spatial_scale - offset
    for r in range(num):
        x1, y1, x2, y2 = boxes[r]
        roi_w, roi_h = x2 - x1, y2 - y1
        if offset == 0.0:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / output_height, roi_w / output_width
        grid_h = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_h / output_height))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(np.ceil(roi_w / output_width))
        if grid_h <= 0 or grid_w <= 0:
            continue
        ys = (
            y1
            + np.arange(output_height)[:, None] * bin_h
            + (np.arange(grid_h)[None, :] + 0.5) * bin_h / grid_h
        )
        xs = (
            x1
            + np.arange(output_width)[:, None] * bin_w
            + (np.arange(grid_w)[None, :] + 0.5) * bin_w / grid_w
        )
        yl, yh, wyl, wyh, vy = _bilinear_axis(ys.reshape(-1), height)
        xl, xh, wxl, wxh, vx = _bilinear_axis(xs.reshape(-1), width)
        img = xc[int(batch_indices[r])]  # (C, H, W)
        valid = (vy[:, None] & vx[None, :]).astype(dt)
        corners = [
            (img[:, yl][:, :, xl], wyl[:, None] * wxl[None, :]),
            (img[:, yl][:, :, xh], wyl[:, None] * wxh[None, :]),
            (img[:, yh][:, :, xl], wyh[:, None] * wxl[None, :]),
            (img[:, yh][:, :, xh], wyh[:, None] * wxh[None, :]),
        ]
        shape = (c, output_height, grid_h, output_width, grid_w)
        if mode == "avg":
            val = sum(v * (w * valid).astype(dt) for v, w in corners)
            out[r] = val.reshape(shape).sum(axis=(2, 4)) / (grid_h * grid_w)
        else:
            # Max mode takes, per sample, the largest weighted corner contribution.
            val = np.max(np.stack([v * (w * valid).astype(dt) for v, w in corners]), axis=0)
            out[r] = val.reshape(shape).max(axis=(2, 4))
    return out.astype(x.dtype, copy=False)


@kernel("MaxRoiPool", since=(1, 22))
def max_roi_pool(
    x: np.ndarray,
    rois: np.ndarray,
    *,
    pooled_shape: list[int] | None = None,
    spatial_scale: float = 1.0,
) -> np.ndarray:
    if not pooled_shape or len(pooled_shape) != 2:
        raise ExecutionError("MaxRoiPool: pooled_shape (height, width) is required")
    ph, pw = pooled_shape
    _, c, height, width = x.shape
    out = np.zeros((rois.shape[0], c, ph, pw), dtype=x.dtype)
    for r, roi in enumerate(rois.astype(np.float64)):
        b = int(roi[0])
        x1, y1, x2, y2 = (int(np.floor(v * spatial_scale + 0.5)) for v in roi[1:5])
        roi_h, roi_w = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        hs = np.clip(np.floor(np.arange(ph) * roi_h / ph).astype(np.int64) + y1, 0, height)
        he = np.clip(np.ceil((np.arange(ph) + 1) * roi_h / ph).astype(np.int64) + y1, 0, height)
        ws = np.clip(np.floor(np.arange(pw) * roi_w / pw).astype(np.int64) + x1, 0, width)
        we = np.clip(np.ceil((np.arange(pw) + 1) * roi_w / pw).astype(np.int64) + x1, 0, width)
        rows = (np.arange(height)[None, :] >= hs[:, None]) & (
            np.arange(height)[None, :] < he[:, None]
        )
        cols = (np.arange(width)[None, :] >= ws[:, None]) & (
            np.arange(width)[None, :] < we[:, None]
        )
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        img = x[b].astype(np.float64)
        # Max over columns per bin column, then over rows per bin row; empty bins give 0.
        by_col = np.where(cols[None, None], img[:, :, None, :], low).max(axis=3)  # (C, H, pw)
        by_bin = np.where(rows[None, :, :, None], by_col[:, None, :, :], low).max(axis=2)
        out[r] = np.where(np.isneginf(by_bin), 0, by_bin).astype(x.dtype)
    return out


def _iou_one(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one corner box (y1, x1, y2, x2, normalised min/max) against many."""
    ymin = np.maximum(box[0], others[:, 0])
    xmin = np.maximum(box[1], others[:, 1])
    ymax = np.minimum(box[2], others[:, 2])
    xmax = np.minimum(box[3], others[:, 3])
    inter = np.clip(ymax - ymin, 0, None) * np.clip(xmax - xmin, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0)


@kernel("NonMaxSuppression", since=(10, 11))
def non_max_suppression(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None = None,
    iou_threshold: np.ndarray | None = None,
    score_threshold: np.ndarray | None = None,
    *,
    center_point_box: int = 0,
) -> np.ndarray:
    limit = (
        0
        if max_output_boxes_per_class is None or np.size(max_output_boxes_per_class) == 0
        else int(np.asarray(max_output_boxes_per_class).reshape(-1)[0])
    )
    iou_t = (
        0.0
        if iou_threshold is None or np.size(iou_threshold) == 0
        else float(np.asarray(iou_threshold).reshape(-1)[0])
    )
    has_score_t = score_threshold is not None and np.size(score_threshold) > 0
    score_t = float(np.asarray(score_threshold).reshape(-1)[0]) if has_score_t else 0.0
    b = boxes.astype(np.float64)
    if center_point_box:
        cx, cy, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        corners = np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)
    else:
        y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        corners = np.stack(
            [np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)],
            axis=-1,
        )
    selected: list[tuple[int, int, int]] = []
    if limit <= 0:
        return np.zeros((0, 3), dtype=np.int64)
    for n in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[n, c].astype(np.float64)
            order = np.argsort(-s, kind="stable")
            if has_score_t:
                order = order[s[order] > score_t]
            cand = corners[n, order]
            alive = np.ones(order.size, dtype=bool)
            kept = 0
            for i in range(order.size):
                if not alive[i]:
                    continue
                selected.append((n, c, int(order[i])))
                kept += 1
                if kept >= limit:
                    break
                rest = slice(i + 1, order.size)
                alive[rest] &= _iou_one(cand[i], cand[rest]) <= iou_t
    return np.array(selected, dtype=np.int64).reshape(-1, 3)
