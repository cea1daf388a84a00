"""Errors become adagrouper.InputError / SimError carrying the command line's message: the
line `adagrouper simulate` prints after "adagrouper simulate: "."""

import json
import os
import tempfile
import unittest

import adagrouper as ag
from support import GPT, TOY, TOY_NET_2S, cli_error, config


class ErrorsCarryTheCliMessage(unittest.TestCase):
    def assert_same_error(self, error_type, kwargs, cli_args):
        with self.assertRaises(error_type) as raised:
            ag.simulate(**kwargs)
        self.assertEqual(str(raised.exception), cli_error("simulate", *cli_args))

    def test_input_errors(self):
        missing = os.path.join(os.path.dirname(TOY), "no-such-pipeline.json")
        cases = [
            (dict(pipeline=missing, network=TOY_NET_2S, micro_batch_size=1),
             ["--pipeline", missing, "--network", TOY_NET_2S, "--schedule", "1f1b", "-b", 1]),
            (dict(pipeline=TOY, network=TOY_NET_2S, schedule="kfkb", k=100, micro_batch_size=1),
             ["--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "kfkb", "--k", 100, "-b", 1]),
            (dict(pipeline=TOY, network=TOY_NET_2S, micro_batch_size=3),
             ["--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "1f1b", "-b", 3]),
            (dict(pipeline=TOY, network=TOY_NET_2S, schedule="no-such", micro_batch_size=1),
             ["--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "no-such", "-b", 1]),
            (dict(pipeline=TOY, network=TOY_NET_2S, w_fill="sometimes", micro_batch_size=1),
             ["--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "1f1b", "--w-fill", "sometimes", "-b", 1]),
            (dict(pipeline=TOY, network=TOY_NET_2S, iterations=0, micro_batch_size=1),
             ["--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "1f1b", "--iterations", 0, "-b", 1]),
            (dict(pipeline=GPT, network=TOY_NET_2S, schedule="zbv", micro_batch_size=2, virtual_stages=3),
             ["--pipeline", GPT, "--network", TOY_NET_2S, "--schedule", "zbv", "-v", 3, "-b", 2]),
        ]
        for kwargs, args in cases:
            with self.subTest(args=args):
                self.assert_same_error(ag.InputError, kwargs, args)

    def test_a_deadlocking_order(self):
        order = config("schedules", "toy-4-deadlock.json")
        self.assert_same_error(ag.InputError, dict(pipeline=TOY, network=TOY_NET_2S, schedule_file=order,
                                                   micro_batch_size=1),
                               ["--pipeline", TOY, "--network", TOY_NET_2S, "--schedule-file", order, "-b", 1])

    def test_a_run_that_cannot_finish(self):
        with tempfile.TemporaryDirectory() as tmp:
            net = os.path.join(tmp, "dead.json")
            with open(net, "w", encoding="utf-8") as f:
                json.dump({"latency_s": 0, "default": {"points": [[0, 1.0], [3, 0.0]]}}, f)
            self.assert_same_error(ag.SimError, dict(pipeline=TOY, network=net, micro_batch_size=1),
                                   ["--pipeline", TOY, "--network", net, "--schedule", "1f1b", "-b", 1])

    def test_a_bad_dict_names_its_field(self):
        with open(TOY, encoding="utf-8") as f:
            doc = json.load(f)
        doc["stages"][1]["profile"][0]["forward_s"] = -1
        with self.assertRaises(ag.InputError) as raised:
            ag.Pipeline(doc, source="mine.json")
        self.assertTrue(str(raised.exception).startswith("mine.json: stages[1].profile[0].forward_s: "),
                        str(raised.exception))

    def test_exception_classes(self):
        self.assertTrue(issubclass(ag.InputError, ValueError))
        self.assertTrue(issubclass(ag.InputError, ag.Error))
        self.assertTrue(issubclass(ag.SimError, RuntimeError))
        self.assertTrue(issubclass(ag.SimError, ag.Error))
        with self.assertRaises(TypeError):
            ag.simulate(TOY, TOY_NET_2S, micro_batch_size="one")
        with self.assertRaises(TypeError):
            ag.simulate(42, TOY_NET_2S, micro_batch_size=1)
        with self.assertRaises(TypeError):
            ag.simulate(TOY, TOY_NET_2S)  # micro_batch_size is required


if __name__ == "__main__":
    unittest.main()
