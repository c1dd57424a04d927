"""Chat templates rendered from tokenizer files, against text written by
hand from each template's definition."""

import json
from datetime import datetime

import pytest

from iron.lm import ChatTemplate, ChatTemplateError, Tokenizer
from iron.lm.synthetic import train_tokenizer

#: Meta-Llama-3-8B-Instruct's template
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)

#: the Llama 3.2 Instruct form (without its tool-calling branches): a dated
#: system header, whitespace control on every tag
LLAMA32 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

#: Gemma 3's template: the system message folded into the first user turn,
#: roles that must alternate, "model" for the assistant
GEMMA3 = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""

CONVERSATION = [
    {"role": "system", "content": "  You are terse. "},
    {"role": "user", "content": "Hi! "},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": [{"type": "text", "text": "Iron "}, {"type": "text", "text": "or steel?"}]},
]  # fmt: skip


def model_dir(tmp_path, special, tokenizer_config):
    """tokenizer.json (a BPE whose special tokens are `special`) and tokenizer_config.json."""
    tokenizer = train_tokenizer(384, special)
    (tmp_path / "tokenizer.json").write_text(tokenizer.to_str())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return tmp_path


LLAMA_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|eot_id|>"]  # fmt: skip
GEMMA_SPECIAL = ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"]


def test_llama3_template_from_tokenizer_files(tmp_path):
    directory = model_dir(tmp_path, LLAMA_SPECIAL, {
        "bos_token": {"content": "<|begin_of_text|>", "lstrip": False},  # an AddedToken
        "eos_token": "<|eot_id|>", "chat_template": LLAMA3,
    })  # fmt: skip
    tokenizer = Tokenizer.from_pretrained(directory)
    expected = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nIron or steel?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert tokenizer.chat_template.render(CONVERSATION) == expected
    ids = tokenizer.chat_prompt(CONVERSATION)
    assert ids == tokenizer.encode(expected)
    # each marker is its one special token, not its characters
    assert ids[:2] == [0, 2] and ids.count(4) == 4 and ids.count(2) == ids.count(3) == 5
    without = tokenizer.chat_template.render(CONVERSATION[:2], add_generation_prompt=False)
    assert without.endswith("Hi!<|eot_id|>")


def test_llama32_template_with_its_date(tmp_path):
    template = ChatTemplate(LLAMA32, {"bos_token": "<|begin_of_text|>"}, "fixture")
    system = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    )
    rest = (
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    messages = CONVERSATION[:2]
    assert template.render(messages, date_string="01 Jan 2025") == (
        system.format(date="01 Jan 2025") + "You are terse." + rest
    )
    today = datetime.now().strftime("%d %b %Y")
    assert template.render(messages[1:]) == system.format(date=today) + rest


def test_gemma3_template_from_tokenizer_files(tmp_path):
    directory = model_dir(tmp_path, GEMMA_SPECIAL, {
        "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
        "add_bos_token": True, "add_eos_token": False, "boi_token": "<start_of_image>",
        "chat_template": GEMMA3,
    })  # fmt: skip
    tokenizer = Tokenizer.from_pretrained(directory)
    expected = (
        "<bos><start_of_turn>user\n  You are terse. \n\nHi!<end_of_turn>\n"
        "<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nIron or steel?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert tokenizer.chat_template.render(CONVERSATION) == expected
    assert tokenizer.chat_prompt(CONVERSATION) == tokenizer.encode(expected)
    with pytest.raises(ChatTemplateError, match="refused: Conversation roles must alternate"):
        tokenizer.chat_prompt([CONVERSATION[1], CONVERSATION[1]])


def test_chat_template_jinja_file_wins_and_named_templates_are_read(tmp_path):
    directory = model_dir(tmp_path, GEMMA_SPECIAL, {
        "bos_token": "<bos>",
        "chat_template": [{"name": "tool_use", "template": "tools"},
                          {"name": "default", "template": "{{ bos_token }}default"}],
    })  # fmt: skip
    assert Tokenizer.from_pretrained(directory).chat_template.render(CONVERSATION) == "<bos>default"
    (directory / "chat_template.jinja").write_text("{{ messages | length }} from the file")
    assert (
        Tokenizer.from_pretrained(directory).chat_template.render(CONVERSATION) == "4 from the file"
    )


def test_transformers_environment_extras():
    template = ChatTemplate(
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
        "{% generation %}{{ m | tojson }}{% endgeneration %}{% endfor %}"
    )
    assert template.render([{"role": "user", "content": "鉄"}, CONVERSATION[2]]) == (
        '{"role": "user", "content": "鉄"}'
    )


def test_a_template_cannot_change_what_it_is_given():
    template = ChatTemplate("{{ messages.append(1) }}", origin="evil.json")
    with pytest.raises(ChatTemplateError, match=r"evil\.json: the chat template refused"):
        template.render(CONVERSATION[1:2])


@pytest.mark.parametrize(
    "messages, rule",
    [([], "non-empty list"), ([{"role": "robot", "content": "x"}], "messages[0].role='robot'"),
     ([{"role": "user", "content": 5}], "messages[0].content: must be text, got int"),
     ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}],
      "this model reads text")],
)  # fmt: skip
def test_bad_conversations_are_named(messages, rule):
    with pytest.raises(ChatTemplateError, match=rule.replace("[", r"\[").replace("(", r"\(")):
        ChatTemplate(LLAMA3).render(messages)


def test_a_template_that_does_not_compile_names_its_file(tmp_path):
    directory = model_dir(tmp_path, LLAMA_SPECIAL, {"chat_template": "{% for m in messages %}"})
    with pytest.raises(
        ChatTemplateError,
        match=r"tokenizer_config.json \(chat_template\): the chat template does not compile",
    ):
        Tokenizer.from_pretrained(directory)


def test_no_template_is_said_when_chat_is_asked_for(tmp_path):
    directory = model_dir(tmp_path, LLAMA_SPECIAL, {"bos_token": "<|begin_of_text|>"})
    tokenizer = Tokenizer.from_pretrained(directory)
    assert tokenizer.chat_template is None
    with pytest.raises(ChatTemplateError, match="has no chat template"):
        tokenizer.chat_prompt(CONVERSATION)


def test_a_special_token_of_the_wrong_type_is_named(tmp_path):
    directory = model_dir(tmp_path, LLAMA_SPECIAL, {"eos_token": 7, "chat_template": LLAMA3})
    with pytest.raises(
        ChatTemplateError, match=r"tokenizer_config\.json: eos_token=7: must be a string"
    ):
        Tokenizer.from_pretrained(directory)
