"""The chat template of the built-in tiny model.

It emits the BOS token itself (chat tokenization runs with ``add_special_tokens=False``), ends every turn with
the EOS token ``<|end|>`` so that a tuned model learns to stop, and wraps assistant content in
``{% generation %}`` markers so that the tokenizer can return the assistant-token mask that training uses.
"""

BOS = "<s>"
EOS = "<|end|>"
PAD = "<pad>"
ROLE_TOKENS = {role: f"<|{role}|>" for role in ("system", "user", "assistant", "tool")}
SPECIAL_TOKENS = [PAD, BOS, EOS, *ROLE_TOKENS.values()]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>\n{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}\n"
    "{% else %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
