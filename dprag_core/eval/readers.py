"""The evaluation's readers and the settings each one starts from.

Two readers: ``reader``, the project's own 0.56M-parameter LM trained to answer
first (``dprag_core/assets/reader``), and ``smollm2``, SmolLM2-135M-Instruct
(:mod:`~dprag_core.eval.smollm2`), a chat model prompted through its chat
template that answers in a sentence frame ("The recommended treatment for X is
Y."). :data:`READERS` holds each one's prompts and the voting mechanisms'
defaults; the shares and the DPSparseVote threshold were chosen by the rule of
docs/evaluation.md ("Tuning") on a development world (corpus seed 1).

>>> READERS["smollm2"].word_share, READERS["smollm2"].threshold_share
(0.5, 0.25)
>>> READERS["reader"].threshold(40)
20.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dprag_core.prompts import KEYWORDS_TEMPLATE, NO_CONTEXT_TEMPLATE, RAG_TEMPLATE

if TYPE_CHECKING:
    from dprag_core.models.hf import DType, HFTextModel, HFTokenModel

__all__ = ["INSTRUCT_PUBLIC_TEMPLATE", "INSTRUCT_TEMPLATE", "READERS", "Reader", "load_reader"]

#: The voters' prompt for an instruct model: one instruction, the record, the question.
INSTRUCT_TEMPLATE = (
    "Use the record below to answer.\n\nRecord: {context}\n\nQuestion: {question}\nAnswer:"
)
#: The same prompt without the record: NonRAG and DPSparseVote's public prediction.
INSTRUCT_PUBLIC_TEMPLATE = "Answer the question.\n\nQuestion: {question}\nAnswer:"
#: DP-KSA's answer prompt for an instruct model (the released keywords, the question).
INSTRUCT_KEYWORDS_TEMPLATE = (
    "Use the keywords below to answer.\n\nKeywords: {keywords}\n\nQuestion: {question}\nAnswer:"
)


@dataclass(frozen=True)
class Reader:
    """One reader's prompts and the voting mechanisms' defaults on it.

    ``template`` / ``public_template`` / ``keywords_template``: the voters', the
    no-context and DP-KSA's answer prompts (user messages: the engines wrap them in
    the model's chat template); ``token_share`` / ``word_share``: ε per private
    token / word as a share of the query's ε (1/share private decisions);
    ``threshold_share``: DPSparseVote's threshold as a share of m;
    ``max_new_tokens``: the answer's length limit; ``answer_words``: the answer
    key's length in words (answer-level voting's public key map,
    :func:`~dprag_core.algorithms.answer_keys.answer_key`'s ``max_words``).

    >>> READERS["reader"].template == RAG_TEMPLATE
    True
    """

    name: str
    template: str
    public_template: str
    keywords_template: str
    token_share: float
    word_share: float
    threshold_share: float
    max_new_tokens: int
    answer_words: int = 6

    def threshold(self, m: int) -> float:
        """DPSparseVote's threshold for ``m`` voters."""
        return self.threshold_share * m

    def voting_prompts(self) -> dict[str, str]:
        """The voting mechanisms' (and DP-RAG's) prompt keywords.

        >>> sorted(READERS["reader"].voting_prompts())
        ['public_template', 'template']
        """
        return {"template": self.template, "public_template": self.public_template}

    def ksa_prompts(self) -> dict[str, str]:
        """KSA's and DP-KSA's prompt keywords.

        >>> sorted(READERS["reader"].ksa_prompts())
        ['answer_template', 'response_template', 'zero_shot_template']
        """
        return {
            "response_template": self.template,
            "answer_template": self.keywords_template,
            "zero_shot_template": self.public_template,
        }


READERS = {
    "reader": Reader(
        name="reader",
        template=RAG_TEMPLATE,
        public_template=NO_CONTEXT_TEMPLATE,
        keywords_template=KEYWORDS_TEMPLATE,
        token_share=1 / 5,
        word_share=1 / 2,
        threshold_share=1 / 2,
        max_new_tokens=12,
    ),
    "smollm2": Reader(
        name="smollm2",
        template=INSTRUCT_TEMPLATE,
        public_template=INSTRUCT_PUBLIC_TEMPLATE,
        keywords_template=INSTRUCT_KEYWORDS_TEMPLATE,
        token_share=1 / 5,  # not tuned on this reader (token-level voting is not its setting)
        word_share=1 / 2,  # the rule's grid {1, 1/2, 1/4} at m/4: 0.17, 0.17, 0.00 -> tie, smaller
        threshold_share=1 / 4,
        max_new_tokens=16,
    ),
}


def load_reader(
    name: str, *, dtype: DType = "float32", prompt_width: int | None = None
) -> tuple[HFTokenModel, HFTextModel]:
    """The token and text models of reader ``name`` (one set of weights).

    ``prompt_width``: the public width of every row (None: the engine's default,
    :func:`~dprag_core.models.envelope.public_width`); an in-process prefill
    computes that many positions a row, so its time scales with it.

    >>> token_model, text_model = load_reader("smollm2", prompt_width=128)  # doctest: +SKIP
    """
    if name not in READERS:
        raise ValueError(f"reader must be one of {sorted(READERS)}, got {name!r}")
    from dprag_core.models.hf import HFTextModel, HFTokenModel

    if name == "smollm2":
        from dprag_core.eval.smollm2 import model_dir

        folder = str(model_dir())
    else:
        from dprag_core.eval.workbench import reader_path

        folder = str(reader_path())
    head = READERS[name].template.split("{context}")[0]  # public: before the records
    token_model = HFTokenModel.from_pretrained(
        folder, dtype=dtype, shared_prefix=head, prompt_width=prompt_width
    )
    return token_model, HFTextModel.on(token_model)
