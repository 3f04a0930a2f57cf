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


if __name__ == "__main__":
    unittest.main()
