"""A tiny chat checkpoint whose generation config lists ``<eos>`` and ``<|im_end|>``.

Like Qwen2/Llama-3 instruct checkpoints: the tokenizer's own EOS is ``<eos>``,
the chat template ends every turn with ``<|im_end|>``, and the generation
config lists both. The weights are set by hand so that greedy decoding is a
fixed chain whatever the chat prompt: after the prompt's last token the model
says the tokens of ``answer``, then ``<|im_end|>``, then ``<pad>`` forever (each
layer's output projections are zero, so a position's hidden state is its
token's embedding; the chain's embeddings are orthogonal unit vectors and the
output rows map each to the next token; every other embedding is zero, whose
logits are all 0, so the argmax is id 0). A model that does not stop at ``<|im_end|>`` runs to
its length limit.

>>> tokenizer, model, chain = chat_checkpoint()  # doctest: +SKIP
>>> tokenizer.decode(chain, skip_special_tokens=True)  # doctest: +SKIP
' aspirin'
"""

from __future__ import annotations

from typing import Any

import torch
from tiny_models import build_model, build_tokenizer

__all__ = ["chat_checkpoint"]


def chat_checkpoint(*, chat: bool = True, answer: str = " aspirin") -> tuple[Any, Any, list[int]]:
    """(tokenizer, Qwen2 model, chain): every chat prompt is answered with ``chain``, the
    tokens of ``answer`` (distinct tokens, fewer than 32) and then ``<|im_end|>``."""
    tokenizer = build_tokenizer(chat=chat)
    model = build_model("qwen2", tokenizer)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    last = tokenizer.encode("\n", add_special_tokens=False)[-1]  # chat prompts end with it
    chain = [*tokenizer.encode(answer, add_special_tokens=False), im_end]
    steps = list(zip([last, *chain[:-1]], chain, strict=True))
    assert len({t for t, _ in steps}) == len(steps) < model.config.hidden_size
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        embed.zero_()
        head.zero_()
        for dim, (token, after) in enumerate(steps):
            embed[token, dim] = 1.0
            head[after, dim] = 10.0
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, im_end]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer, model, chain
