"""What a training job resolves to: platform defaults, overridden by the tenant's manifest."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass
class TrainJobSpec:
    base_model_path: str
    train_file: str
    """Tokenized Parquet with ``input_ids`` and ``assistant_masks``."""
    output_dir: str
    """Holds ``checkpoints/`` and the final ``adapter/``."""
    method: str = "lora"
    objective: str = "sft"
    """``sft`` on ``input_ids`` / ``assistant_masks``, or ``dpo`` on ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``."""
    dpo_beta: float = 0.1
    dpo_sft_weight: float = 1.0
    """Weight of the chosen answer's NLL added to the DPO loss (RPO); 0 for pure DPO (``ftpipe.training.dpo``)."""
    learning_rate: float = 2e-3
    """Adapters on a tiny model need far more than TRL's 2e-5 default to move."""
    epochs: float = 3.0
    max_steps: int = -1
    micro_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_seq_len: int = 512
    packing: bool = False
    activation_checkpointing: bool = False
    """Recompute activations in the backward pass: about a third more compute for far less memory."""
    """Best-fit-decreasing packing of whole examples into max_seq_len rows, padding-free, attention kept within
    each example. Pays off with FlashAttention's variable-length kernels on a GPU; slower on the CPU."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: list[str] | str = "all-linear"
    qlora_compute_dtype: str = "auto"
    """float32 on CPU, bfloat16 on GPUs that support it, unless set."""
    warmup_ratio: float = 0.05
    seed: int = 42
    logging_steps: int = 5
    save_steps: int = 50
    save_minutes: float = 10.0
    """A checkpoint also every this many minutes, whichever of the two comes first."""
    keep_checkpoints: int = 2
    progress_bar: bool = False
    tenant_overrides: list[str] = field(default_factory=list)
    """The hyperparameters the tenant set in the manifest: an out-of-memory they caused is theirs to pay."""

    def to_dict(self) -> dict:
        return asdict(self)

    def epochs_to_run(self, n_examples: int, gpus: int = 1) -> float:
        """The epochs training will really run: ``max_steps``, when set, decides over ``epochs``, as in TRL."""
        if self.max_steps <= 0 or n_examples <= 0:
            return self.epochs
        examples_per_step = self.micro_batch_size * self.gradient_accumulation_steps * gpus
        return float(f"{self.max_steps * examples_per_step / n_examples:.4g}")

    @classmethod
    def from_dict(cls, data: dict) -> "TrainJobSpec":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _compute_dtype(value) -> str:
    if value not in ("auto", "float32", "bfloat16", "float16"):
        raise ValueError(f"qlora_compute_dtype must be auto, float32, bfloat16 or float16, not {value!r}")
    return value


def _flag(value) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise ValueError(f"must be true or false, not {value!r}")


OVERRIDABLE = {
    "learning_rate": float, "epochs": float, "max_steps": int, "micro_batch_size": int,
    "gradient_accumulation_steps": int, "max_seq_len": int, "lora_r": int, "lora_alpha": int,
    "lora_dropout": float, "seed": int, "dpo_beta": float,
    "dpo_sft_weight": float, "packing": _flag,
    "activation_checkpointing": _flag, "qlora_compute_dtype": _compute_dtype,
}


def resolve_spec(base_model_path: str, train_file: str, method: str, overrides: dict,
                 automatic: dict | None = None) -> TrainJobSpec:
    """Platform defaults, then the automatic choices (name -> value), then the manifest's hyperparameters."""
    spec = TrainJobSpec(base_model_path=base_model_path, train_file=train_file, output_dir="", method=method)
    for name, value in {**(automatic or {}), **overrides}.items():
        setattr(spec, name, OVERRIDABLE[name](value))
    spec.tenant_overrides = sorted(overrides)
    return spec


def explain(spec: TrainJobSpec, automatic_reasons: dict[str, str]) -> list[dict]:
    """Each overridable hyperparameter's value and where it came from: the tenant, the platform's rule, a default."""
    rows = []
    for name in OVERRIDABLE:
        if name in spec.tenant_overrides:
            source, reason = "manifest", "set by the tenant"
        elif name in automatic_reasons:
            source, reason = "automatic", automatic_reasons[name]
        else:
            source, reason = "default", "platform default"
        value = getattr(spec, name)
        shown = f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value).lower()
        rows.append({"name": name, "value": value, "shown": shown, "source": source, "reason": reason})
    return rows
