#!/usr/bin/env python3
"""Tool-calling prompts as transformers renders them, for crate/tests/chat_template.rs.

For each real chat template with tool support (tests/fixtures/chat_templates), renders OpenAI-style
conversations with `tools` through transformers' render_jinja_template (what apply_chat_template
calls). Calls' `arguments` go to transformers as dicts (what its templates expect); ferrolm gets
the OpenAI request form (a JSON string) and must render the same text.

    /path/to/venv/bin/python tests/scripts/make_tool_fixtures.py   # transformers 5.x
"""
import json
import pathlib
import time

from transformers.utils.chat_template_utils import render_jinja_template

ROOT = pathlib.Path(__file__).resolve().parents[2]
DIR = ROOT / "tests/fixtures/chat_templates"
TEMPLATES = ["qwen2.5.jinja", "qwen3.jinja", "llama-3.1.jinja", "llama-3.2.jinja", "mistral-nemo.jinja"]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                     "unit": {"enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two numbers",
     "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"]}}},
]
CALL = {"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}


def conversations():
    ask = {"role": "user", "content": "What is the weather in Paris?"}
    called = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    result = {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"temp\": 21}"}
    return [
        [ask],
        [{"role": "system", "content": "You are a helpful assistant."}, ask],
        [ask, called, result],
        [ask, called, result, {"role": "assistant", "content": "It is 21 degrees."}, {"role": "user", "content": "And 2+3?"}],
    ]


def openai_form(messages):
    """The same messages as an OpenAI client sends them (arguments as a JSON string)."""
    out = []
    for m in messages:
        m = json.loads(json.dumps(m))
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
        out.append(m)
    return out


def main():
    expected = json.loads((DIR / "expected.json").read_text())
    specials = {t["file"]: (t["bos_token"], t["eos_token"]) for t in expected["templates"]}
    out = {"tools": TOOLS, "templates": []}
    for file in TEMPLATES:
        src = (DIR / file).read_text()
        bos, eos = specials[file]
        cases = []
        for conv in conversations():
            # transformers' templates read content as a string; ferrolm passes "" for a null one.
            tf = [dict(m, content=m["content"] if m["content"] is not None else "") for m in conv]
            try:
                today = time.strftime("%d %b %Y", time.gmtime())
                rendered = render_jinja_template([tf], tools=TOOLS, chat_template=src, add_generation_prompt=True,
                                                 bos_token=bos, eos_token=eos)[0][0]
                # Llama 3.2 writes today's date (strftime_now); the test accepts any date there.
                rendered = rendered.replace(today, "{{DATE}}") if "strftime_now" in src else rendered
                cases.append({"messages": openai_form(conv), "rendered": rendered})
            except Exception as e:  # a template that refuses a conversation shape
                cases.append({"messages": openai_form(conv), "error": str(e)})
        out["templates"].append({"file": file, "bos_token": bos, "eos_token": eos, "cases": cases})
    (DIR / "tools_expected.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
