import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from capgate_plugin import MISSING, RequireApproval, format_number, get_pointer, parse_json, require_approval  # noqa: E402


class Numbers(unittest.TestCase):
    def test_serde_display(self):
        cases = {"649": "649", "649.0": "649.0", "1e300": "1e+300", "1e-7": "1e-7", "1e-5": "0.00001",
                 "1e15": "1000000000000000.0", "1e16": "1e+16", "18446744073709551615": "18446744073709551615",
                 "18446744073709551616": "1.8446744073709552e+19", "-0": "-0.0"}
        for lit, want in cases.items():
            self.assertEqual(format_number(parse_json(lit)), want, lit)

    def test_rejects_nan(self):
        with self.assertRaises(ValueError):
            parse_json("NaN")


class Pointers(unittest.TestCase):
    def test_serde_rules(self):
        v = {"a": [1, 2], "a/b": 3}
        self.assertEqual(get_pointer(v, "/a/1"), 2)
        self.assertIs(get_pointer(v, "/a/01"), MISSING)
        self.assertEqual(get_pointer(v, "/a~1b"), 3)
        self.assertIs(get_pointer(v, "a"), MISSING)
        self.assertEqual(get_pointer(v, ""), v)


class Decisions(unittest.TestCase):
    def test_require_approval(self):
        self.assertEqual(require_approval("r", type="manager", expires_in_ms=5), RequireApproval("r", "manager", 5))
        with self.assertRaises(ValueError):
            require_approval("")
        with self.assertRaises(ValueError):
            require_approval("r", expires_in_ms=True)



class LazyRequest(unittest.TestCase):
    """Documents parse on first read; the pointer helpers ask the host when it lends a reader."""

    def request(self, read=None, **raw):
        from capgate_plugin import CapabilityInfo, PolicyRequest, RawJson

        texts = {"input": '{"amount": 649.0, "order": {"id": "o_1"}}', "context": '{"region": "eu"}',
                 "config": '{"maxAmount": 500}', "attributes": '{"orgId": "org_1"}'}
        texts.update(raw)
        return PolicyRequest.from_wire("invocation", "aiSdk", CapabilityInfo("orders.refund", "write", "high", []), "u_dana", "user",
                                       "exec_1", None, RawJson(texts["input"], texts["context"], texts["config"], texts["attributes"]),
                                       read=read)

    def test_without_a_host_the_parsed_documents_answer(self):
        r = self.request()
        self.assertEqual(r.input_value("/amount"), 649.0)
        self.assertEqual(r.input_text("/amount"), "649.0")
        self.assertEqual(r.config_value("/maxAmount"), 500)
        self.assertEqual(r.context_value("/region"), "eu")
        self.assertEqual(r.attribute("/orgId"), "org_1")
        self.assertIs(r.input_value("/missing"), MISSING)
        self.assertTrue(r.has_input)
        self.assertEqual(r.actor.attributes, {"orgId": "org_1"})

    def test_with_a_host_nothing_is_parsed(self):
        asked = []
        host = {("input", "/amount"): ("number", "649.0"), ("input", "/order"): ("json", '{"id":"o_1"}'),
                ("config", "/maxAmount"): ("number", "500"), ("actor-attributes", "/orgId"): ("text", "org_1")}

        def read(doc, pointer):
            asked.append((doc, pointer))
            return host.get((doc, pointer))

        r = self.request(read, input="{not json", config="{not json", context="{", attributes="{")
        self.assertEqual(r.input_value("/amount"), 649.0)
        self.assertEqual(r.input_text("/amount"), "649.0")
        self.assertEqual(r.input_value("/order"), {"id": "o_1"})
        self.assertIs(r.input_value("/missing"), MISSING)
        self.assertEqual(r.config_value("/maxAmount"), 500)
        self.assertEqual(r.attribute("/orgId"), "org_1")
        self.assertIs(r.context_value("/region"), MISSING)
        self.assertEqual(len(asked), 7)
        self.assertFalse(r.has_input, "the input text itself still does not parse")
        with self.assertRaises(ValueError):
            r.config

    def test_discovery_has_no_input_and_does_not_ask(self):
        r = self.request(lambda d, p: self.fail("asked"), input=None)
        self.assertIs(r.input_value("/amount"), MISSING)
        self.assertIsNone(r.input_text("/amount"))
        self.assertFalse(r.has_input)

    def test_a_request_built_from_values_answers_like_sdk_0_2s(self):
        from capgate_plugin import Actor, CapabilityInfo, PolicyRequest

        r = PolicyRequest("invocation", "aiSdk", CapabilityInfo("orders.refund", "write", "high", []),
                          Actor("u_dana", "user", {"orgId": "org_1"}), {"amount": 649}, True, None, "exec_1", None,
                          {"maxAmount": 500})
        self.assertEqual(r.input, {"amount": 649})
        self.assertEqual(r.input_value("/amount"), 649)
        self.assertEqual(r.config_value("/maxAmount"), 500)
        self.assertEqual(r.attribute("/orgId"), "org_1")
        self.assertEqual(r.actor.attributes, {"orgId": "org_1"})
        self.assertEqual(r.raw.input, '{"amount":649}')
        self.assertTrue(r.has_input)
        discovery = PolicyRequest("discovery", "aiSdk", r.capability, r.actor, None, False, None, "", None, {})
        self.assertFalse(discovery.has_input)
        self.assertIs(discovery.input_value("/amount"), MISSING)


if __name__ == "__main__":
    unittest.main()
