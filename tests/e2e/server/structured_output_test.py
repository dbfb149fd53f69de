#!/usr/bin/env python3
"""Structured output and forced tool calls through `mla serve`, with the official `openai` client
and the `jsonschema` package as the oracle (docs/SERVING.md §Structured output). The random-weight
tiny model writes noise when unconstrained, so every reply that parses and validates here does so
because of the token masks: 20 schemas x 10 sampled replies (nested objects, arrays, enums,
numbers, strings with escapes, anyOf, $ref recursion), json_object, streamed == whole, forced tool
calls whose arguments validate against the tool's parameters, and 400s that name the keyword.
The sampled replies carry a logit_bias toward '"', '}' and ']': a random model would wander
inside a string for hundreds of tokens (any text is valid there), and the bias keeps each reply
short enough to end inside max_tokens; which tokens are valid is still the mask's alone.

Usage: structured_output_test.py MLA_BINARY MODEL_DIR   (exit 77: openai or jsonschema missing)
"""
import json
import sys
import unittest

from mla_server import MlaServer, find_binary_and_model

try:
    import jsonschema
    import openai
except ImportError as e:
    print(f"skipped: {e.name} is not installed")
    sys.exit(77)

BINARY, MODEL = find_binary_and_model(sys.argv)
SERVER = None
ASK = [{"role": "user", "content": "Answer in JSON."}]

S = {"type": "string"}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def obj(props, required=None, **kw):
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required,
            "additionalProperties": False, **kw}


SCHEMAS = [
    obj({"name": S}),
    obj({"n": I, "x": N, "ok": B}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"tags": {"type": "array", "items": S, "maxItems": 4}}),
    obj({"point": obj({"x": N, "y": N})}),
    obj({"list": {"type": "array", "items": obj({"id": I, "label": S}), "maxItems": 3}}),
    obj({"maybe": {"type": ["string", "null"]}}),
    obj({"v": {"anyOf": [S, I, {"type": "array", "items": B, "maxItems": 3}]}}),
    obj({"const": {"const": "fixed \"quoted\" \\ value"}, "k": {"enum": [1, 2.5, None, True]}}),
    obj({"a": S, "b": I, "c": B}, required=["c"]),
    obj({"deep": obj({"deeper": obj({"deepest": {"type": "array", "items": I, "maxItems": 3}})})}),
    obj({"matrix": {"type": "array", "items": {"type": "array", "items": I, "maxItems": 3},
                    "maxItems": 3}}),
    obj({"escaped": S, "unicode": S}),
    obj({"few": {"type": "array", "items": I, "minItems": 2, "maxItems": 2}}),
    {"$defs": {"node": obj({"v": I, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                              "maxItems": 2}})},
     "$ref": "#/$defs/node"},
    obj({"when": {"type": "string", "format": "date-time", "description": "any string"}}),
    obj({"free": {"type": "object"}}),
    obj({"nums": {"type": "array", "items": N, "maxItems": 5}, "sign": {"enum": [-1, 0, 1]}}),
    obj({"user": obj({"name": S, "roles": {"type": "array", "items": {"enum": ["admin", "dev"]},
                                           "maxItems": 2}}), "active": B}),
    obj({"empty": obj({})}),
]


def setUpModule():
    global SERVER
    SERVER = MlaServer(BINARY, MODEL, "--max-num-seqs", "16")


def tearDownModule():
    if SERVER:
        assert SERVER.stop() == 0, "mla serve did not exit 0 on SIGTERM"


def client():
    return openai.OpenAI(base_url=SERVER.base_url + "/v1", api_key="x", max_retries=0,
                         timeout=300)


CLOSING_BIAS = {}


def closing_bias():
    """logit_bias for the tokens of '"', '}' and ']' (see the module docstring), looked up once."""
    if not CLOSING_BIAS:
        for text in ('"', "}", "]"):
            _, _, r = SERVER.post_json("/tokenize", {"prompt": text})
            CLOSING_BIAS[str(r["tokens"][-1])] = 4
    return CLOSING_BIAS


def schema_format(schema):
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema,
                                                   "strict": True}}


class StructuredOutputTest(unittest.TestCase):
    def test_200_replies_over_20_schemas_validate(self):
        self.assertEqual(len(SCHEMAS), 20)
        for k, schema in enumerate(SCHEMAS):
            with self.subTest(schema=k):
                r = client().chat.completions.create(
                    model=SERVER.model_id, messages=ASK, n=10, temperature=1.0, seed=100 + k,
                    max_tokens=1500, response_format=schema_format(schema),
                    logit_bias=closing_bias())
                self.assertEqual(len(r.choices), 10)
                for c in r.choices:
                    self.assertEqual(c.finish_reason, "stop", c.message.content)
                    value = json.loads(c.message.content)
                    jsonschema.validate(value, schema)

    def test_json_object_and_stream_equals_whole(self):
        kw = dict(model=SERVER.model_id, messages=ASK, temperature=1.0, seed=9, max_tokens=1500,
                  response_format={"type": "json_object"}, logit_bias=closing_bias())
        whole = client().chat.completions.create(**kw)
        self.assertIsInstance(json.loads(whole.choices[0].message.content), dict)
        chunks = list(client().chat.completions.create(**kw, stream=True))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(text, whole.choices[0].message.content)
        # /v1/completions takes response_format too.
        comp = client().completions.create(model=SERVER.model_id, prompt="x", max_tokens=1500,
                                           temperature=1.0, seed=3, logit_bias=closing_bias(),
                                           extra_body={"response_format": schema_format(SCHEMAS[1])})
        jsonschema.validate(json.loads(comp.choices[0].text), SCHEMAS[1])

    def test_forced_tool_calls_validate(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "strict": True,
                                                   "parameters": SCHEMAS[4]}},
                 {"type": "function", "function": {"name": "lookup", "parameters": SCHEMAS[5]}}]
        for name, schema in (("get_weather", SCHEMAS[4]), ("lookup", SCHEMAS[5])):
            kw = dict(model=SERVER.model_id, messages=ASK, tools=tools, n=4, temperature=1.0,
                      seed=5, max_tokens=1500, logit_bias=closing_bias(),
                      tool_choice={"type": "function", "function": {"name": name}})
            r = client().chat.completions.create(**kw)
            for c in r.choices:
                self.assertEqual(c.finish_reason, "tool_calls")
                self.assertIsNone(c.message.content)
                (call,) = c.message.tool_calls
                self.assertEqual(call.function.name, name)
                self.assertTrue(call.id)
                jsonschema.validate(json.loads(call.function.arguments), schema)
            # Streamed: the name first, then the arguments, equal to the whole reply's.
            chunks = list(client().chat.completions.create(**{**kw, "n": 1}, stream=True))
            calls = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
            self.assertEqual(calls[0].function.name, name)
            args = "".join(tc.function.arguments or "" for tc in calls)
            first = client().chat.completions.create(**{**kw, "n": 1})
            self.assertEqual(args, first.choices[0].message.tool_calls[0].function.arguments)
            self.assertEqual(chunks[-1].choices[0].finish_reason, "tool_calls")

    def test_required_picks_one_of_the_tools(self):
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMAS[4]}},
                 {"type": "function", "function": {"name": "get_time", "parameters": SCHEMAS[1]}},
                 {"type": "function", "function": {"name": "get_time_zone"}}]
        by_name = {"get_weather": SCHEMAS[4], "get_time": SCHEMAS[1], "get_time_zone": {"type": "object"}}
        r = client().chat.completions.create(model=SERVER.model_id, messages=ASK, tools=tools,
                                             tool_choice="required", n=12, temperature=1.0,
                                             seed=11, max_tokens=1500, logit_bias=closing_bias())
        seen = set()
        for c in r.choices:
            self.assertEqual(c.finish_reason, "tool_calls")
            (call,) = c.message.tool_calls
            jsonschema.validate(json.loads(call.function.arguments), by_name[call.function.name])
            seen.add(call.function.name)
        self.assertGreater(len(seen), 1, "12 samples all chose one tool")

    def test_refusals_name_the_keyword(self):
        bad = [
            (schema_format(obj({"a": {"type": "string", "pattern": "^x"}})),
             "response_format.json_schema.schema", "pattern"),
            (schema_format({"type": "array"}), "response_format.json_schema.schema", "object"),
            ({"type": "yaml"}, "response_format.type", "yaml"),
            ({"type": "json_schema"}, "response_format.json_schema", "schema"),
        ]
        for fmt, param, word in bad:
            with self.subTest(param=param, word=word):
                with self.assertRaises(openai.BadRequestError) as cm:
                    client().chat.completions.create(model=SERVER.model_id, messages=ASK,
                                                     max_tokens=2, response_format=fmt)
                self.assertEqual(cm.exception.body["param"], param)
                self.assertIn(word, cm.exception.body["message"])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], *sys.argv[3:]], verbosity=2)
