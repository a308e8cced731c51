"""What a training job resolves to: platform defaults, overridden by the tenant's manifest."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields


@dataclass
class TrainJobSpec:
    base_model_path: str
    train_file: str
    """Tokenized Parquet with ``input_ids`` and ``assistant_masks``."""
    output_dir: str
    """Holds ``checkpoints/``, ``best/`` (the best-evaluated weights while training) and the final ``adapter/``."""
    eval_file: str = ""
    """The tokenized held-out split, with the same columns as ``train_file``; empty: no validation loss."""
    method: str = "lora"
    objective: str = "sft"
    """``sft`` on ``input_ids`` / ``assistant_masks``, or ``dpo`` on ``prompt_ids`` / ``chosen_ids`` /
    ``rejected_ids``."""
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
    eval_steps: int = 0
    """The validation loss every this many optimizer steps; 0: about ``validation.AUTO_EVALUATIONS`` per run."""
    checkpoint_selection: str = "best"
    """``best``: the adapter is the weights of the lowest validation loss; ``last``: the final weights."""
    early_stopping_patience: int = 0
    """Stop after this many evaluations in a row without a lower validation loss; 0: never."""
    max_runtime_seconds: float = 0.0
    """Stop with a checkpoint, as the tenant's failure, past this many seconds (0: no limit); set by the pre-flight."""
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


def _selection(value) -> str:
    if value not in ("best", "last"):
        raise ValueError(f"must be best or last, not {str(value)[:40]!r}")
    return value


def _flag(value) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise ValueError(f"must be true or false, not {value!r}")


def _as_float(value, what: str) -> float:
    """A manifest's number, string or not, as a float (infinite past any float); ``what`` names it in errors."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be {what}, not {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond any float: certainly out of range
        assert isinstance(value, int)  # float() overflows on nothing else: a str too large for one reads as inf
        return math.inf if value > 0 else -math.inf
    except ValueError:
        raise ValueError(f"must be {what}, not {str(value)[:40]!r}") from None


def _integer(low: int, high: int, also: tuple[int, ...] = ()):
    """A whole number in [low, high]: a float that is not whole (2.5) or a bool is refused, never truncated."""
    def convert(value) -> int:
        number = _as_float(value, "a whole number")
        if not math.isfinite(number) or number != int(number):
            raise ValueError(f"must be a whole number, not {str(value)[:40]}")  # NaN, infinite, or 2.5
        if not (low <= number <= high or number in also):
            extra = "".join(f" or {a}" for a in also)
            raise ValueError(f"must be between {low:,} and {high:,}{extra}, not {number:.6g}")
        return int(number)
    return convert


def _number(low: float, high: float, low_open: bool = False):
    """A finite number in [low, high] (or (low, high] with ``low_open``): NaN and infinities are refused."""
    def convert(value) -> float:
        number = _as_float(value, "a number")
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, not {number}")
        if number < low or number > high or (low_open and number == low):
            raise ValueError(f"must be {'above' if low_open else 'at least'} {low:g} and at most {high:g}, "
                             f"not {number:.6g}")
        return number
    return convert


# What a manifest may set, and the range each value must lie in: checked when the manifest is read, so that a
# value the trainer cannot run (a zero batch, a NaN rate, a billion epochs) is refused before any GPU time.
# The ranges are wide on purpose: they exclude what is broken, not what is unusual.
OVERRIDABLE = {
    "learning_rate": _number(0, 1, low_open=True),
    "epochs": _number(0, 100, low_open=True),
    "max_steps": _integer(1, 1_000_000, also=(-1,)),
    "micro_batch_size": _integer(1, 1024),
    "gradient_accumulation_steps": _integer(1, 1024),
    "max_seq_len": _integer(16, 131_072),
    "lora_r": _integer(1, 1024),
    "lora_alpha": _integer(1, 4096),
    "lora_dropout": _number(0, 0.9),
    "seed": _integer(0, 2**32 - 1),
    "dpo_beta": _number(0, 10, low_open=True),
    "dpo_sft_weight": _number(0, 100),
    "packing": _flag,
    "activation_checkpointing": _flag,
    "qlora_compute_dtype": _compute_dtype,
    "eval_steps": _integer(0, 1_000_000),
    "checkpoint_selection": _selection,
    "early_stopping_patience": _integer(0, 1000),
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
