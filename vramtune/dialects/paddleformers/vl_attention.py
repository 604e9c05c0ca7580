"""Child side: the vision tower's attention with the memory a GPU's flash kernel holds, on a CPU.

PaddleFormers' CPU attention (eager, sdpa) builds the full heads x P x P score matrix of the vision tower and keeps it
for the backward pass; flashmask, which its GPU recipes run, keeps only the query, key, value, output and the
per-row log-sum-exp (linear in P). This is that algorithm in Paddle: the forward computes the scores a block of rows
at a time and keeps what flash keeps; the backward recomputes each block's scores from them. Its one extra is a
transient block of scores (heads x BLOCK x P) while a block is computed, freed at once. Registered in PaddleFormers'
ALL_ATTENTION_FUNCTIONS under NAME; only the vision tower's configuration is pointed at it."""
from __future__ import annotations

from typing import Any

import paddle
from paddle.autograd import PyLayer

NAME = "vramtune_linear"
BLOCK = 128  # query rows per block


class _LinearAttention(PyLayer):
    @staticmethod
    def forward(ctx, query, key, value, scaling):  # [B, H, L, D]
        outputs, sums = [], []
        with paddle.no_grad():
            for start in range(0, query.shape[2], BLOCK):
                scores = paddle.matmul(query[:, :, start:start + BLOCK], key, transpose_y=True) * scaling
                lse = paddle.logsumexp(scores, axis=-1)
                probs = paddle.exp(scores - lse.unsqueeze(-1))
                del scores
                outputs.append(paddle.matmul(probs, value))
                sums.append(lse)
                del probs
            output = paddle.concat(outputs, axis=2)
            lse = paddle.concat(sums, axis=2)
        ctx.save_for_backward(query, key, value, output, lse)
        ctx.scaling = scaling
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, output, lse = ctx.saved_tensor()
        scaling = ctx.scaling
        delta = paddle.sum(grad_output * output, axis=-1)
        grad_query, grad_key, grad_value = [], paddle.zeros_like(key), paddle.zeros_like(value)
        for start in range(0, query.shape[2], BLOCK):
            rows = slice(start, start + BLOCK)
            block_query, block_grad = query[:, :, rows], grad_output[:, :, rows]
            probs = paddle.exp(paddle.matmul(block_query, key, transpose_y=True) * scaling
                               - lse[:, :, rows].unsqueeze(-1))
            grad_value += paddle.matmul(probs, block_grad, transpose_x=True)
            grad_probs = paddle.matmul(block_grad, value, transpose_y=True)
            grad_scores = probs * (grad_probs - delta[:, :, rows].unsqueeze(-1)) * scaling
            del probs, grad_probs
            grad_query.append(paddle.matmul(grad_scores, key))
            grad_key += paddle.matmul(grad_scores, block_query, transpose_x=True)
        return paddle.concat(grad_query, axis=2), grad_key, grad_value


def linear_attention(module: Any, query, key, value, attention_mask=None, dropout: float = 0.0,
                     scaling: float | None = None, is_causal: bool | None = None, **kwargs):
    """PaddleFormers' attention interface, for the vision tower's attention: full, or block-diagonal over its images
    (the tower's attn_mask_startend_row_indices: each key column's [end, start) rows); anything else (a dense mask,
    causal, dropout) goes to PaddleFormers' eager attention."""
    spans = _spans(kwargs.get("attn_mask_startend_row_indices"), query.shape[2])
    if attention_mask is not None or is_causal or dropout or spans is None:
        from paddleformers.nn.attention.eager_attention import eager_attention_forward

        return eager_attention_forward(module, query, key, value, attention_mask=attention_mask, dropout=dropout,
                                       scaling=scaling, is_causal=is_causal, **kwargs)
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    outputs = [_LinearAttention.apply(query[:, :, start:end], key[:, :, start:end], value[:, :, start:end], scaling)
               for start, end in spans]
    output = (outputs[0] if len(outputs) == 1 else paddle.concat(outputs, axis=2)).transpose([0, 2, 1, 3])
    return output.reshape([0, 0, output.shape[2] * output.shape[3]]), None


def _spans(indices: Any, length: int) -> list[tuple[int, int]] | None:
    """The images' [start, end) blocks from the tower's startend row indices ([1, 1, L, 2]: end, start per key
    column), or the whole sequence without them; None for any other mask."""
    if indices is None:
        return [(0, length)]
    if indices.ndim != 4 or indices.shape[-1] != 2:
        return None
    pairs = indices.reshape([-1, 2]).numpy().tolist()
    spans: list[tuple[int, int]] = []
    for column, (end, start) in enumerate(pairs):
        if not start <= column < end:
            return None
        if not spans or spans[-1] != (start, end):
            spans.append((int(start), int(end)))
    return spans if spans[0][0] == 0 and spans[-1][1] == length and all(
        a[1] == b[0] for a, b in zip(spans, spans[1:])) else None


def register() -> None:
    from paddleformers.nn.attention.interface import ALL_ATTENTION_FUNCTIONS

    ALL_ATTENTION_FUNCTIONS[NAME] = linear_attention
