"""Tiny random transformers models and tokenizers, built offline (no model hub).

Shared by every test that needs a real causal LM: the token engine, the DP
algorithms, and the LangChain / LlamaIndex / DP-ICL adapters.

>>> tok = build_tokenizer()
>>> model = build_model("gpt2", tok)
>>> model.config.vocab_size == len(tok)
True

The byte-level BPE tokenizer is trained on a few sentences (with accented
words, so that some characters span several tokens). ``build_tokenizer(chat=True)``
adds a Qwen-style chat template. The Llama model gets a config vocabulary a few
rows larger than the tokenizer, like real checkpoints padded to a multiple of 64.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

__all__ = ["CHAT_TEMPLATE", "TRAINING_TEXT", "ModelKind", "build_model", "build_tokenizer"]

ModelKind = Literal["gpt2", "llama", "qwen2"]

TRAINING_TEXT = [
    "Context: Alice Martin was diagnosed with migraine and treated with aspirin.",
    "Question: Which treatment did Alice Martin receive? Answer: aspirin.",
    "Bob Durand has asthma; his doctor prescribed salbutamol twice a day.",
    "Chloé Lefèvre suffers from diabetes and takes metformin every morning.",
    "The patient's fever décroît after paracetamol. Café, naïve, résumé, über.",
    "Question: What disease does Bob Durand have? Answer: asthma.",
    "Context:\nNo documents.\n\nQuestion: who treats headache?\nAnswer: a doctor.",
]

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_SPECIAL = ["<pad>", "<eos>", "<|im_start|>", "<|im_end|>"]


def build_tokenizer(*, chat: bool = False, vocab_size: int = 320) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained offline; ``chat=True`` adds a chat template.

    >>> build_tokenizer(chat=True).chat_template is not None
    True
    """
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def _common(tok: PreTrainedTokenizerFast) -> dict[str, Any]:
    return {
        "pad_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "bos_token_id": tok.eos_token_id,
    }


def build_model(
    kind: ModelKind,
    tok: PreTrainedTokenizerFast,
    *,
    seed: int = 0,
    hidden: int = 32,
    layers: int = 2,
    dtype: torch.dtype = torch.float32,
) -> PreTrainedModel:
    """A randomly initialised causal LM of ``kind`` sized for ``tok`` (eval mode, CPU).

    >>> build_model("qwen2", build_tokenizer()).config.model_type
    'qwen2'
    """
    torch.manual_seed(seed)
    vocab = len(tok)
    model: PreTrainedModel
    if kind == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=512,
            n_embd=hidden,
            n_layer=layers,
            n_head=4,
            **_common(tok),
        )
        model = GPT2LMHeadModel(config)
    elif kind == "llama":
        config = LlamaConfig(
            vocab_size=vocab + 7,  # padded vocab: rows past len(tok) are not real tokens
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            **_common(tok),
        )
        model = LlamaForCausalLM(config)
    elif kind == "qwen2":
        config = Qwen2Config(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            **_common(tok),
        )
        model = Qwen2ForCausalLM(config)
    else:
        raise ValueError(f"kind must be 'gpt2', 'llama' or 'qwen2', got {kind!r}")
    return model.to(dtype).eval()
