"""The locally built tiny model: Qwen2 architecture, head_dim 64, tokenizer that survives a round trip."""

from transformers import AutoConfig, AutoTokenizer

from pspo_repro.data.prompts import PAPER_SYSTEM_PROMPT, render_prompt


def test_tiny_model_architecture(tiny_model_dir):
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert config.model_type == "qwen2"
    assert config.hidden_size == 64 and config.num_hidden_layers == 2
    assert config.head_dim == 64  # vLLM's CPU attention needs it


def test_tiny_tokenizer_round_trip(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "Mia buys 12 pencils at $0.25 each.\n#### 3"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    prompt = render_prompt(tok, "How many?")
    assert prompt.startswith("<|im_start|>system\n" + PAPER_SYSTEM_PROMPT)
    assert prompt.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
