"""Fused torch ops written out as the primitives the backend runs: a graph pass before the rules.

Under `torch.no_grad()` an eval `nn.TransformerEncoderLayer` calls one native op,
`torch._transformer_encoder_layer_fwd`, and attention modules call `F.scaled_dot_product_attention`;
both are a few linears, one fused attention (fused_attention.py: AttentionFloat / Double), layer norms
and elementwise ops. `expand(gm, modules)` replaces each such node (without a mask or dropout: those stay
torch) by those primitives, traced into the graph with torch.fx proxies, and returns the words the report
shows. The expansions follow torch's own definitions
(torch/nn/modules/transformer.py, F.scaled_dot_product_attention's documented reference).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch.fx as fx
import torch.nn.functional as F
from torch.fx.proxy import GraphAppendingTracer, Proxy

from . import fused_attention
from .nodes import Call, describe


def encoder_layer(src: Any, embed_dim: int, num_heads: int, qkv_weight: Any, qkv_bias: Any, proj_weight: Any,
                  proj_bias: Any, use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: Any,
                  norm_bias_1: Any, norm_weight_2: Any, norm_bias_2: Any, ffn_weight_1: Any, ffn_bias_1: Any,
                  ffn_weight_2: Any, ffn_bias_2: Any, **unused: Any) -> Any:
    """nn.TransformerEncoderLayer's forward (batch first, no mask, no dropout) in primitives."""
    head = embed_dim // num_heads

    def self_attention(x: Any) -> Any:
        qkv = F.linear(x, qkv_weight, qkv_bias).chunk(3, -1)
        q, k, v = (qkv[i].unflatten(-1, (num_heads, head)).transpose(1, 2) for i in range(3))
        out = fused_attention.node(q, k, v, 1.0 / math.sqrt(head), heads_last=True).flatten(-2)
        return F.linear(out, proj_weight, proj_bias)

    def feed_forward(x: Any) -> Any:
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    shape = (embed_dim,)
    if norm_first:
        x = src + self_attention(F.layer_norm(src, shape, norm_weight_1, norm_bias_1, eps))
        return x + feed_forward(F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps))
    x = F.layer_norm(src + self_attention(src), shape, norm_weight_1, norm_bias_1, eps)
    return F.layer_norm(x + feed_forward(x), shape, norm_weight_2, norm_bias_2, eps)


def sdpa(query: Any, key: Any, value: Any, scale: float | None, depth: int, is_causal: bool, **unused: Any) -> Any:
    """F.scaled_dot_product_attention without mask or dropout: one fused attention node."""
    return fused_attention.node(query, key, value, 1.0 / math.sqrt(depth) if scale is None else scale, is_causal)


def _val(v: Any) -> Any:
    return v.meta.get("val", v.meta.get("example_value")) if isinstance(v, fx.Node) else None


def _encoder_args(call: Call) -> dict | str:
    a = call.args
    src = _val(a["src"])
    if a["mask"] is not None:
        return "_transformer_encoder_layer_fwd with a mask stays torch"
    if src is None or src.dim() != 3 or a["embed_dim"] % a["num_heads"]:
        return "_transformer_encoder_layer_fwd on an input that is not [batch, tokens, embed_dim] stays torch"
    return a


def _sdpa_args(call: Call) -> dict | str:
    a = call.args
    if a["attn_mask"] is not None or a["dropout_p"] or a["enable_gqa"] or not isinstance(a["is_causal"], bool):
        return "scaled_dot_product_attention with a mask, dropout or enable_gqa stays torch"
    q = _val(a["query"])
    if q is None or q.dim() < 2 or not isinstance(q.shape[-1], int):
        return "scaled_dot_product_attention on inputs of unknown shape stays torch"
    return {**a, "depth": q.shape[-1]}


# op -> (arguments or why not, expansion, words for the report)
EXPANSIONS: dict[str, tuple[Callable[[Call], dict | str], Callable[..., Any], str]] = {
    "encoder_layer": (_encoder_args, encoder_layer, "TransformerEncoderLayer written out as linear, attention, "
                                                    "layer_norm and elementwise nodes"),
    "sdpa": (_sdpa_args, sdpa, "scaled_dot_product_attention as one fused attention node"),
}


def expand(gm: fx.GraphModule, modules: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Replace every expandable node by its primitives (in place): (words per expansion, node name -> why a
    node of an expandable op was left as it is)."""
    tracer = GraphAppendingTracer(gm.graph)
    done, kept = [], {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        call = describe(node, modules)
        if not isinstance(call, Call) or call.op not in EXPANSIONS:
            continue
        check, expansion, words = EXPANSIONS[call.op]
        args = check(call)
        if isinstance(args, str):
            kept[node.name] = args
            continue
        with gm.graph.inserting_before(node):
            proxies = {k: Proxy(v, tracer) if isinstance(v, fx.Node) else v for k, v in args.items()}
            out = expansion(**proxies)
        node.replace_all_uses_with(out.node)
        gm.graph.erase_node(node)
        done.append(f"{node.name}: {words}")
    if done:
        gm.graph.lint()
        gm.recompile()
    return done, kept
