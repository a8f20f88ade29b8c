"""A BERT sentence encoder in numpy: the forward pass sentence-transformers runs, without torch.

From a sentence-transformers model folder, it computes what that model's
`encode(..., normalize_embeddings=True)` does for a BERT encoder with mean pooling
(L2-normalised when `modules.json` lists `Normalize`), in float32 as on torch's CPU
path, so the vectors match without the torch dependency.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigurationError

F32 = npt.NDArray[np.float32]

_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4"}
_MASKED = np.float32(-1e30)
_PARTS = {  # layer key -> (weight name, whether it is a dense projection, stored transposed)
    "out": ("attention.output.dense", True),
    "ln1": ("attention.output.LayerNorm", False),
    "up": ("intermediate.dense", True),
    "down": ("output.dense", True),
    "ln2": ("output.LayerNorm", False),
}


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a `.safetensors` file as read-only numpy arrays (no `safetensors` package).

    The format is an 8-byte little-endian header length, a JSON header mapping
    each name to its dtype, shape and byte range, then the raw little-endian data.
    """
    data = path.read_bytes()
    header_len = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ConfigurationError(
                f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}"
            )
        start, end = info["data_offsets"]
        array = np.frombuffer(
            data, dtype=dtype, count=(end - start) // np.dtype(dtype).itemsize, offset=base + start
        )
        tensors[name] = array.reshape(info["shape"])
    return tensors


_Layer = dict[str, F32]
"""One encoder layer's weights: `qkv` (query, key and value projections side by side),
`out`, `up`, `down` (`_w` transposed for `x @ w`, `_b`) and the LayerNorms `ln1`, `ln2`."""


class BertEncoder:
    """The numpy forward pass of one BERT sentence-transformers model; stateless after loading."""

    def __init__(self, model_dir: Path) -> None:
        config = _read_json(model_dir / "config.json")
        if config.get("model_type", "bert") != "bert" or config.get("hidden_act", "gelu") != "gelu":
            raise ConfigurationError(
                f"{model_dir}: only BERT encoders with GELU are supported, got "
                f"model_type={config.get('model_type')!r} hidden_act={config.get('hidden_act')!r}"
            )
        pooling = _read_json(model_dir / "1_Pooling" / "config.json")
        others = ("cls_token", "max_tokens", "mean_sqrt_len_tokens")
        if not pooling.get("pooling_mode_mean_tokens") or any(
            pooling.get(f"pooling_mode_{mode}") for mode in others
        ):
            raise ConfigurationError(f"{model_dir}: only mean pooling is supported, got {pooling}")
        modules = _read_json_list(model_dir / "modules.json")
        self.normalize = any(m.get("type", "").endswith(".Normalize") for m in modules)
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_positions = int(config["max_position_embeddings"])
        weights = read_safetensors(model_dir / "model.safetensors")
        weights = {k.removeprefix("bert."): v for k, v in weights.items()}
        self._load(weights, int(config["num_hidden_layers"]))

    def _load(self, w: dict[str, npt.NDArray[Any]], layers: int) -> None:
        def f32(name: str) -> F32:
            return np.ascontiguousarray(w[name], dtype=np.float32)

        def params(name: str, dense: bool = True) -> tuple[F32, F32]:
            weight = f32(f"{name}.weight")
            return (np.ascontiguousarray(weight.T) if dense else weight), f32(f"{name}.bias")

        self.word = f32("embeddings.word_embeddings.weight")
        self.position = f32("embeddings.position_embeddings.weight")
        self.segment = f32("embeddings.token_type_embeddings.weight")
        self.emb_ln = params("embeddings.LayerNorm", dense=False)
        self.layers: list[_Layer] = []
        for i in range(layers):
            p = f"encoder.layer.{i}"
            q, k, v = (params(f"{p}.attention.self.{part}") for part in ("query", "key", "value"))
            layer: _Layer = {
                "qkv_w": np.ascontiguousarray(np.concatenate([q[0], k[0], v[0]], axis=1)),
                "qkv_b": np.concatenate([q[1], k[1], v[1]]),
            }
            for key, (name, dense) in _PARTS.items():
                layer[f"{key}_w"], layer[f"{key}_b"] = params(f"{p}.{name}", dense)
            self.layers.append(layer)

    def encode(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> F32:
        """Sentence vectors for one padded batch: `ids` and `mask` are (batch, length)."""
        batch, length = ids.shape
        x = self.word[ids] + self.position[:length][None, :, :] + self.segment[0][None, None, :]
        x = _layer_norm(x, *self.emb_ln, self.eps)
        bias = np.where(mask[:, None, None, :] > 0, np.float32(0.0), _MASKED).astype(np.float32)
        for layer in self.layers:
            x = self._block(x, bias, layer)
        weights = mask.astype(np.float32)[:, :, None]
        pooled: F32 = (x * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), np.float32(1e-9))
        if self.normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.maximum(norms, np.float32(1e-12))
        return pooled.astype(np.float32)

    def _block(self, x: F32, bias: F32, layer: _Layer) -> F32:
        batch, length, hidden = x.shape
        heads, head_dim = self.heads, hidden // self.heads
        flat = x.reshape(batch * length, hidden)
        qkv = (flat @ layer["qkv_w"] + layer["qkv_b"]).reshape(batch, length, 3, heads, head_dim)
        # q, k, v: (batch, heads, length, dim)
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        scores = q @ k.transpose(0, 1, 3, 2) * np.float32(1.0 / math.sqrt(head_dim)) + bias
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        attended = self._add_norm(context, flat, layer, "out", "ln1")
        up = _gelu(attended @ layer["up_w"] + layer["up_b"])
        return self._add_norm(up, attended, layer, "down", "ln2").reshape(batch, length, hidden)

    def _add_norm(self, x: F32, residual: F32, layer: _Layer, dense: str, norm: str) -> F32:
        """LayerNorm(x @ dense + residual): the output of an attention or feed-forward sublayer."""
        summed = x @ layer[f"{dense}_w"] + layer[f"{dense}_b"] + residual
        return _layer_norm(summed, layer[f"{norm}_w"], layer[f"{norm}_b"], self.eps)


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: F32 = centred / np.sqrt(var + np.float32(eps)) * weight + bias
    return out


def _gelu(x: F32) -> F32:
    """Exact (erf) GELU, as BERT's `gelu`; erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = np.abs(x) * np.float32(1.0 / math.sqrt(2.0))
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.3275911) * z)
    poly: F32 = np.zeros_like(z)
    for coefficient in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = (poly + np.float32(coefficient)) * t  # Horner, innermost first
    erf = np.float32(1.0) - poly * np.exp(-z * z)
    erf = np.where(x < 0, -erf, erf)
    out: F32 = np.float32(0.5) * x * (np.float32(1.0) + erf)
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigurationError(
            f"{path.parent}: not a sentence-transformers model folder ({path.name} is missing)"
        ) from exc
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"{path}: expected a JSON object")
    return loaded


def _read_json_list(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return [m for m in loaded if isinstance(m, dict)] if isinstance(loaded, list) else []
