"""Tiny stand-ins for LLaDA, Dream and MDLM, saved as checkpoint directories (nothing downloaded).

``save_standin(kind, directory)`` writes a checkpoint directory laid out like the real one: a
``config.json`` whose ``auto_map`` names the modeling file copied next to it
(:mod:`sketchwm.testing.standins.modeling_standin`, written for sketchwm), ``model.safetensors``
with seeded random weights, and a tokenizer with the real model's special tokens, id layout,
padding side and chat template. The backends load it through their normal path
(``AutoModel.from_pretrained(dir, trust_remote_code=True)``), so remote-code loading is exercised.

Interfaces reproduced (real value → stand-in):

=========  ==========================================  ==========================================
kind       real checkpoint                             stand-in
=========  ==========================================  ==========================================
llada      vocab 126464 (tokenizer 126349 + padding),  ~120 words + LLaDA's specials, 8 padded
           mask 126336 ``<|mdm_mask|>``, EOS 126081    embedding rows; same special tokens, in the
           ``<|endoftext|>``, EoT 126348 ``<|eot_id|>``  same order (specials after the words)
dream      vocab 152064 (tokenizer 151667 + padding),  ~120 words + Qwen2/Dream specials, 8 padded
           mask 151666 ``<|mask|>``, EOS = pad 151643  rows; left padding; Qwen chat template;
           ``<|endoftext|>``, ``<|im_end|>`` 151645     logits shifted (position i predicts i+1)
mdlm       GPT-2 tokenizer (50257), vocab 50258,       ~120 words + ``<|endoftext|>``; mask id =
           mask id 50257, no pad/mask token            len(tokenizer), vocab = len + 1
=========  ==========================================  ==========================================
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Literal

import torch

from sketchwm.testing import TINY_WORDS

__all__ = ["KINDS", "save_standin", "standin_tokenizer", "standin_backend", "probe_ids"]

KINDS = ("llada", "dream", "mdlm")
#: words the chat templates need besides :data:`TINY_WORDS`
_EXTRA_WORDS = ["user", "assistant", "system", "You", "helpful", "."]
_PADDED_ROWS = 8  # embedding rows beyond the tokenizer (real checkpoints pad to a multiple of 64/128)

_LLADA_SPECIALS = ["<|unk|>", "<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|mdm_mask|>"]
_DREAM_SPECIALS = ["<|unk|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"]
_MDLM_SPECIALS = ["<|endoftext|>"]

_LLADA_TEMPLATE = (
    "{{ '<|startoftext|>' }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + "
    "m['content'] + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
_DREAM_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def standin_tokenizer(kind: Literal["llada", "dream", "mdlm"], instruct: bool = True) -> Any:
    """The stand-in tokenizer of ``kind`` (word level; see the module table).

    Raises:
        ValueError: unknown kind.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if kind not in KINDS:
        raise ValueError(f"unknown stand-in kind {kind!r} (one of {', '.join(KINDS)})")
    specials = {"llada": _LLADA_SPECIALS, "dream": _DREAM_SPECIALS, "mdlm": _MDLM_SPECIALS}[kind]
    words = list(TINY_WORDS) + _EXTRA_WORDS
    vocab = {t: i for i, t in enumerate(words + specials)}
    unk = "<|endoftext|>" if kind == "mdlm" else "<|unk|>"
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")
    if kind == "llada":
        kw = dict(bos_token="<|startoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token=unk,
                  additional_special_tokens=["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|mdm_mask|>"])
        template = _LLADA_TEMPLATE
    elif kind == "dream":
        kw = dict(bos_token="<|beginoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token=unk,
                  mask_token="<|mask|>", additional_special_tokens=["<|im_start|>", "<|im_end|>"])
        template = _DREAM_TEMPLATE
    else:  # GPT-2: <|endoftext|> is bos, eos and unk; no pad, no mask token
        kw = dict(bos_token=unk, eos_token=unk, unk_token=unk)
        template = None
    out = PreTrainedTokenizerFast(tokenizer_object=tok, padding_side="left" if kind == "dream" else "right", **kw)
    if instruct and template is not None:
        out.chat_template = template
    return out


def probe_ids(tokenizer: Any, n: int = 7) -> list[int]:
    """``n`` ordinary word ids (never banned) for the position probe of the modeling file."""
    return [int(tokenizer.convert_tokens_to_ids(w)) for w in TINY_WORDS[3 : 3 + n]]


def save_standin(
    kind: Literal["llada", "dream", "mdlm"],
    directory: str | Path,
    *,
    instruct: bool = True,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 32,
    max_length: int = 256,
    position_probe: bool = False,
    stop_after: int | None = None,
    stop_slope: float = 1.5,
) -> Path:
    """Write a stand-in checkpoint of ``kind`` into ``directory`` (created) and return its path.

    Args:
        kind: "llada", "dream" or "mdlm".
        instruct: give the tokenizer the model's chat template (LLaDA-Instruct, Dream-Instruct).
        seed: weight seed. layers, hidden: size of the random transformer.
        max_length: the config's maximum sequence length.
        position_probe: logits encode the sequence index (see :mod:`.modeling_standin`).
        stop_after, stop_slope: the EOS logit grows by ``stop_slope`` per position after ``stop_after``.

    Raises:
        ValueError: unknown kind.
    """
    from . import modeling_standin as ms

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok = standin_tokenizer(kind, instruct=instruct)
    n = len(tok)
    probe = probe_ids(tok) if position_probe else None
    common = dict(probe_ids=probe, stop_after=stop_after, stop_slope=stop_slope)
    ids = tok.convert_tokens_to_ids
    if kind == "llada":
        cfg = ms.StandinLLaDAConfig(vocab_size=n + _PADDED_ROWS, d_model=hidden, n_layers=layers,
                                    max_sequence_length=max_length, mask_token_id=ids("<|mdm_mask|>"),
                                    eos_token_id=ids("<|endoftext|>"), pad_token_id=ids("<|endoftext|>"), **common)
        cls = ms.StandinLLaDAModelLM
    elif kind == "dream":
        cfg = ms.StandinDreamConfig(vocab_size=n + _PADDED_ROWS, hidden_size=hidden, num_hidden_layers=layers,
                                    max_position_embeddings=max_length, mask_token_id=ids("<|mask|>"),
                                    pad_token_id=ids("<|endoftext|>"), bos_token_id=ids("<|beginoftext|>"),
                                    eos_token_id=ids("<|endoftext|>"), **common)
        cls = ms.StandinDreamModel
    else:
        cfg = ms.StandinMDLMConfig(vocab_size=n + 1, model_length=max_length, hidden_dim=hidden, n_blocks=layers,
                                   eos_token_id=ids("<|endoftext|>"), **common)
        cls = ms.StandinMDLMModel
    name = cls.__name__
    cfg.auto_map = {"AutoConfig": f"modeling_standin.{type(cfg).__name__}", "AutoModel": f"modeling_standin.{name}",
                    "AutoModelForMaskedLM": f"modeling_standin.{name}"}
    cpu_rng = torch.random.get_rng_state()
    torch.manual_seed(seed)  # building a test model; the global RNG is restored below
    model = cls(cfg).eval()
    torch.random.set_rng_state(cpu_rng)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    shutil.copyfile(Path(ms.__file__), directory / "modeling_standin.py")
    # save_pretrained records the class's own module; the checkpoint must point at the copied file
    conf = json.loads((directory / "config.json").read_text())
    conf["auto_map"] = cfg.auto_map
    conf.pop("architectures", None)
    (directory / "config.json").write_text(json.dumps(conf, indent=2))
    return directory


def standin_backend(kind: Literal["llada", "dream", "mdlm"], directory: str | Path, device: str = "cpu",
                    params: dict[str, Any] | None = None, **standin_kw: Any) -> Any:
    """Save a stand-in of ``kind`` into ``directory`` and load it through the built-in backend of the same name."""
    from sketchwm_builtin.backends import DreamBackend, LLaDABackend, MDLMBackend

    path = save_standin(kind, directory, **standin_kw)
    cls = {"llada": LLaDABackend, "dream": DreamBackend, "mdlm": MDLMBackend}[kind]
    return cls({"path": str(path), "device": device, "dtype": "float32", **(params or {})})
