"""Tiny local assets for the demo, built once per directory; nothing is downloaded:
a word-level tokenizer with a chat template, a 1-layer Llama with random (seeded) weights, a critic
copy whose remote-code class swaps verl's hard-coded flash_attention_2 for eager (there is no
flash-attn on a CPU), and gsm8k-style train/test parquet files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

_WORDS = [
    "what",
    "is",
    "the",
    "answer",
    "to",
    "plus",
    "minus",
    "times",
    "how",
    "many",
    "apples",
    "does",
    "tom",
    "have",
    "?",
    ".",
    ",",
    "#",
    "let",
    "me",
    "think",
    "step",
    "by",
    "step",
    "so",
    "final",
    "yes",
    "no",
    "a",
    "an",
    "of",
    "in",
    "on",
    "and",
    "or",
    "it",
    "####",
]
#: the stand-in LLM's tool calls, word by word (verl's hermes parser reads ``<tool_call> {json} </tool_call>``; the
#: word-level tokenizer joins words with spaces, which JSON allows): demo/tool_agent.py says them
TOOL_WORDS = [
    "<tool_call>",
    "</tool_call>",
    '{"name":',
    '"search",',
    '"run_python",',
    '"browse",',
    '"arguments":',
    '{"query":',
    '{"expr":',
    '"apples"}}',
    '"tom"}}',
    '"2+3"}}',
    '"6*7"}}',
    '"oops"}',
]
_SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <|end|> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)
_CRITIC_CODE = '''from transformers import LlamaForTokenClassification


class CpuLlamaForTokenClassification(LlamaForTokenClassification):
    """verl loads value models with attn_implementation="flash_attention_2" hard-coded; use eager on a CPU."""

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        if kwargs.get("attn_implementation") == "flash_attention_2":
            kwargs["attn_implementation"] = "eager"
        return super().from_pretrained(*args, **kwargs)
'''
_VERSION = "2"  # 2: the tool-call words
_VLLM_VERSION = "2"  # 2: a 4096-token context


def build(root: Path) -> Path:
    """Build the assets under ``root`` (skipped when already built) and return ``root``."""
    root = Path(root)
    stamp = root / ".built"
    if stamp.exists() and stamp.read_text() == _VERSION:
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _model(root / "tiny_model")
    _critic(root / "tiny_model", root / "tiny_critic")
    _data(root)
    stamp.write_text(_VERSION)
    return root


def _model(model_dir: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for tok in _SPECIALS + _WORDS + [str(i) for i in range(100)] + TOOL_WORDS:
        vocab.setdefault(tok, len(vocab))
    wl = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=wl,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=_SPECIALS[4:],
    )
    tokenizer.chat_template = _CHAT_TEMPLATE
    tokenizer.save_pretrained(model_dir)
    _save_llama(model_dir, len(vocab), vocab["<s>"], vocab["</s>"], vocab["<pad>"], hidden=16)


def _save_llama(
    model_dir: Path, vocab_size: int, bos: int, eos: int, pad: int, hidden: int, positions: int = 256
) -> None:
    """A 1-layer, 2-head Llama with seeded random weights (``hidden`` wide, MLP twice that) into ``model_dir``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=pad,
        architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(model_dir)


def vllm_model(root: Path) -> Path:
    """The actor for the real vLLM rollout: the demo's tokenizer, head_dim 32 (vLLM's CPU attention refuses
    head sizes below 32; tiny_model's is 8) and a 4096-token context, which verl gives vLLM as max_model_len:
    room for a long-tail answer (``--slow rollout_sample``; verl keeps response_length tokens of any answer).
    Built once, beside the other assets."""
    model_dir = Path(root) / "tiny_model_vllm"
    stamp = model_dir / ".built"
    if stamp.exists() and stamp.read_text() == _VLLM_VERSION:
        return model_dir

    shutil.rmtree(model_dir, ignore_errors=True)
    src = Path(root) / "tiny_model"
    shutil.copytree(
        src, model_dir, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "config.json", "generation_config.json")
    )
    base = json.loads((src / "config.json").read_text())
    _save_llama(
        model_dir,
        base["vocab_size"],
        base["bos_token_id"],
        base["eos_token_id"],
        base["pad_token_id"],
        hidden=64,
        positions=4096,
    )
    stamp.write_text(_VLLM_VERSION)
    return model_dir


def _critic(model_dir: Path, critic_dir: Path) -> None:
    shutil.copytree(model_dir, critic_dir)
    (critic_dir / "modeling_cpu_critic.py").write_text(_CRITIC_CODE)
    cfg_path = critic_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["auto_map"] = {"AutoModelForTokenClassification": "modeling_cpu_critic.CpuLlamaForTokenClassification"}
    cfg_path.write_text(json.dumps(cfg, indent=2))


def _data(root: Path) -> None:
    import pandas as pd

    def rows(n: int, split: str) -> list[dict]:
        out = []
        for i in range(n):
            a, b = i % 7 + 1, i % 5 + 2
            out.append(
                {
                    "data_source": "openai/gsm8k",
                    "prompt": [{"role": "user", "content": f"what is {a} plus {b} ?"}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                    "extra_info": {"split": split, "index": i},
                }
            )
        return out

    pd.DataFrame(rows(64, "train")).to_parquet(root / "train.parquet")
    pd.DataFrame(rows(4, "test")).to_parquet(root / "test.parquet")
