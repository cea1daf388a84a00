"""adagrouper.sweep() over configuration dicts equals one simulate() per configuration (and
the command line for a few), in input order; run_study() equals `adagrouper sweep`."""

import json
import os
import tempfile
import unittest

import adagrouper as ag
from support import GPT, TOY, TOY_NET_2S, cli, cli_json, config


def periodic_network(low_fraction):
    """25 GbE preempted periodically: 1/8 of the link for low_fraction of every 10 s."""
    return {"latency_s": 30e-6,
            "default": {"pattern": "periodic", "high": 2.8e9, "low": 0.35e9, "period_s": 10,
                        "low_fraction": low_fraction}}


def hundred_configs():
    networks = [periodic_network(f / 10) for f in range(10)]  # low_fraction 0 .. 0.9
    schedules = [("1f1b", None), ("kfkb", 2), ("kfkb", 4), ("dapple-b", None), ("gpipe", None)]
    return [{"network": net, "schedule": schedule, "k": k, "micro_batch_size": b}
            for net in networks for schedule, k in schedules for b in (1, 2)]


class SweepEqualsSingleRuns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pipeline = ag.Pipeline(GPT)
        cls.configs = hundred_configs()
        cls.results = ag.sweep(cls.configs, pipeline=cls.pipeline, iterations=2, start_time=3.7)

    def test_a_hundred_configurations(self):
        self.assertEqual(len(self.configs), 100)
        self.assertEqual(len(self.results), 100)
        for i, c in enumerate(self.configs):
            single = ag.simulate(self.pipeline, c["network"], schedule=c["schedule"], k=c["k"],
                                 micro_batch_size=c["micro_batch_size"], iterations=2, start_time=3.7)
            self.assertEqual(self.results[i], single, f"configs[{i}]")
        # Preemption only slows a run down.
        one_f_one_b = [r["mean_iteration_time_s"] for r in self.results if r["schedule"] == "1f1b"
                       and r["micro_batch_size"] == 2]
        self.assertEqual(one_f_one_b, sorted(one_f_one_b))

    def test_threads_do_not_change_results(self):
        self.assertEqual(ag.sweep(self.configs[:20], pipeline=self.pipeline, iterations=2, start_time=3.7, jobs=1),
                         self.results[:20])

    def test_equals_a_hundred_cli_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(len(self.configs)):
                c = self.configs[i]
                net = os.path.join(tmp, f"net-{i}.json")
                with open(net, "w", encoding="utf-8") as f:
                    json.dump(c["network"], f)
                args = ["simulate", "--pipeline", GPT, "--network", net, "--schedule", c["schedule"],
                        "--micro-batch-size", c["micro_batch_size"], "--iterations", 2, "--start-time", 3.7,
                        "--json"]
                if c["k"] is not None:
                    args += ["--k", c["k"]]
                self.assertEqual(self.results[i], cli_json(*args), f"configs[{i}]")


class SweepErrors(unittest.TestCase):
    def test_a_bad_configuration(self):
        configs = [{"schedule": "1f1b"}, {"schedule": "kfkb", "k": 100}, {"schedule": "kfkb", "k": 2}]
        with self.assertRaises(ag.InputError) as raised:
            ag.sweep(configs, pipeline=TOY, network=TOY_NET_2S, micro_batch_size=1)
        self.assertEqual(raised.exception.index, 1)
        results = ag.sweep(configs, pipeline=TOY, network=TOY_NET_2S, micro_batch_size=1, return_exceptions=True)
        self.assertEqual(results[0]["mean_iteration_time_s"], 65.0)
        self.assertIsInstance(results[1], ag.InputError)
        self.assertIn("--k", str(results[1]))
        self.assertEqual(results[2]["mean_iteration_time_s"], 49.0)

    def test_unknown_and_missing_keys(self):
        with self.assertRaises(ag.InputError) as raised:
            ag.sweep([{"pipeline": TOY, "network": TOY_NET_2S, "micro_batch_size": 1, "shedule": "1f1b"}])
        self.assertIn("configs[0]: unknown key 'shedule'", str(raised.exception))
        with self.assertRaises(ag.InputError) as raised:
            ag.sweep([{"pipeline": TOY, "micro_batch_size": 1}])
        self.assertEqual(str(raised.exception), "configs[0]: network: missing")
        with self.assertRaises(TypeError):
            ag.sweep([42])
        self.assertEqual(ag.sweep([]), [])


class RunStudyEqualsTheCliSweep(unittest.TestCase):
    def test_toy_schedules(self):
        spec = config("sweeps", "toy-schedules.json")
        rows = ag.run_study(spec)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.jsonl")
            rc, _, err = cli("sweep", spec, "--output", out, "--quiet")
            self.assertEqual(rc, 0, err)
            with open(out, encoding="utf-8") as f:
                want = sorted((json.loads(line) for line in f), key=lambda r: r["index"])
        self.assertEqual(rows, want)
        self.assertEqual([r["index"] for r in rows], list(range(len(rows))))

    def test_a_spec_as_a_dict(self):
        spec = {"defaults": {"pipeline": TOY, "network": TOY_NET_2S, "micro_batch_size": 1},
                "grid": {"schedule": ["1f1b", "kfkb"], "k": [2]}}
        rows = ag.run_study(spec, jobs=2)
        self.assertEqual([r["mean_iteration_time_s"] for r in rows], [65.0, 49.0])


if __name__ == "__main__":
    unittest.main()
