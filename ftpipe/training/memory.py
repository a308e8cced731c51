"""How much accelerator memory a training job needs, before it runs: weights, optimizer, activations.

An estimate, deliberately on the safe side, from the model's shape (``config.json``) alone:
- weights: 2 bytes per parameter (bf16); QLoRA stores the linear layers in NF4 with double quantization,
  about 0.53 bytes per parameter, and keeps embeddings and norms in bf16;
- what trains costs 16 bytes per trainable parameter (fp32 master weight, gradient and two AdamW moments;
  a full fine-tune keeps its bf16 weights besides); FSDP shards a full fine-tune's state over the slot's
  GPUs, DDP replicates an adapter's;
- activations without recomputation, with a fused (flash / SDPA) attention kernel: 34 bytes per token per
  hidden unit per layer (Korthikanti et al., 2022); with activation checkpointing only each layer's bf16
  input is kept (2 bytes) and one layer's activations are live at a time; plus the logits in bf16 and their
  fp32 loss copy and gradient (10 bytes per vocabulary entry per token);
- a fixed 1.5 GB for the CUDA context and kernels, and 10% for allocator fragmentation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

GB = 1024**3
NF4_BYTES_PER_PARAM = 0.53
TRAINABLE_BYTES_PER_PARAM = 16
ACTIVATION_BYTES_PER_TOKEN_HIDDEN_LAYER = 34
LOGIT_BYTES_PER_TOKEN_VOCAB = 10
CONTEXT_GB = 1.5
FRAGMENTATION = 1.10


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    num_parameters: int

    @classmethod
    def from_pretrained_dir(cls, path: str | Path, num_parameters: int) -> "ModelShape":
        config = json.loads((Path(path) / "config.json").read_text())
        config = config.get("text_config", config)  # multimodal configs nest the language model's
        heads = config["num_attention_heads"]
        return cls(
            hidden=config["hidden_size"], intermediate=config["intermediate_size"],
            layers=config["num_hidden_layers"], heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            vocab=config["vocab_size"], num_parameters=num_parameters,
        )

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of each linear projection in one decoder layer (attention and gated MLP)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]

    def linear_parameters(self) -> int:
        return self.layers * sum(a * b for a, b in self.linear_shapes())

    def lora_parameters(self, rank: int) -> int:
        return self.layers * sum(rank * (a + b) for a, b in self.linear_shapes())


@dataclass(frozen=True)
class MemoryEstimate:
    weights_gb: float
    training_state_gb: float
    activations_gb: float
    overhead_gb: float

    @property
    def total_gb(self) -> float:
        return self.weights_gb + self.training_state_gb + self.activations_gb + self.overhead_gb

    def as_dict(self) -> dict:
        return {"weights_gb": round(self.weights_gb, 3), "training_state_gb": round(self.training_state_gb, 3),
                "activations_gb": round(self.activations_gb, 3), "overhead_gb": round(self.overhead_gb, 3),
                "total_gb": round(self.total_gb, 3)}


def estimate_memory(shape: ModelShape, method: str, lora_rank: int, seq_len: int, micro_batch: int,
                    gpus: int = 1, checkpointing: bool = False) -> MemoryEstimate:
    """Per-GPU memory of one training process."""
    if method == "full":
        weights = shape.num_parameters * 2 / gpus
        state = shape.num_parameters * TRAINABLE_BYTES_PER_PARAM / gpus
    else:
        if method == "qlora":
            linear = shape.linear_parameters()
            weights = linear * NF4_BYTES_PER_PARAM + (shape.num_parameters - linear) * 2
        else:
            weights = shape.num_parameters * 2
        trainable = shape.lora_parameters(lora_rank)
        if method == "dora":
            trainable += shape.layers * sum(out for _, out in shape.linear_shapes())  # magnitude vectors
        state = trainable * TRAINABLE_BYTES_PER_PARAM
    tokens = seq_len * micro_batch
    per_layer = tokens * shape.hidden * ACTIVATION_BYTES_PER_TOKEN_HIDDEN_LAYER
    layers = tokens * shape.hidden * shape.layers * 2 + per_layer if checkpointing else per_layer * shape.layers
    activations = layers + tokens * shape.vocab * LOGIT_BYTES_PER_TOKEN_VOCAB
    body = (weights + state + activations) / GB
    return MemoryEstimate(weights / GB, state / GB, activations / GB,
                          CONTEXT_GB + body * (FRAGMENTATION - 1))
