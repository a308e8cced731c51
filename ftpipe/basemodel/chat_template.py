"""The chat template of the built-in tiny model.

It emits the BOS token itself (chat tokenization runs with ``add_special_tokens=False``), ends every turn with
the EOS token ``<|end|>`` so that a tuned model learns to stop, and wraps assistant content in
``{% generation %}`` markers so that the tokenizer can return the assistant-token mask that training uses.

Tools follow transformers' convention (``apply_chat_template(messages, tools=...)``, an assistant message's
``tool_calls`` with ``function.arguments`` as an object): the tools are listed in a system turn before the
conversation, and each call is a ``<tool_call>`` JSON line inside the assistant's generation span, so that the
calls are learned and the tool's answers (role ``tool``) are not. A conversation without tools renders exactly
as it did before tools were supported, so the pre-trained weights do not depend on this.
"""

BOS = "<s>"
EOS = "<|end|>"
PAD = "<pad>"
ROLE_TOKENS = {role: f"<|{role}|>" for role in ("system", "user", "assistant", "tool")}
SPECIAL_TOKENS = [PAD, BOS, EOS, *ROLE_TOKENS.values()]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}"
    "<|system|>\nTools:\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>\n{% generation %}"
    "{% if message['content'] is defined and message['content'] %}{{ message['content'] }}{% endif %}"
    "{% if message['tool_calls'] is defined and message['tool_calls'] %}"
    "{% for call in message['tool_calls'] %}"
    "{% set function = call['function'] if call['function'] is defined else call %}"
    "<tool_call>{{ {'name': function['name'], 'arguments': function['arguments']} | tojson }}</tool_call>"
    "{% endfor %}"
    "{% endif %}"
    "<|end|>{% endgeneration %}\n"
    "{% else %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
