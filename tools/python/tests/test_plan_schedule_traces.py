"""adagrouper.plan(), schedule() and the trace functions give what `adagrouper plan --json`,
`adagrouper schedule` and `adagrouper trace` print."""

import os
import unittest

import adagrouper as ag
from support import GPT, PREEMPTED, ROOT, TOY, TOY_NET_2S, cli, cli_error, cli_json

PERIODIC = os.path.join(ROOT, "traces", "data", "periodic-50pct-10s.json")


class Plan(unittest.TestCase):
    def test_gpt_on_the_preempted_network(self):
        plan = ag.plan(GPT, PREEMPTED, iterations=2, start_time=0.5)
        self.assertEqual(plan, cli_json("plan", "--pipeline", GPT, "--network", PREEMPTED, "--iterations", 2,
                                        "--start-time", 0.5, "--json"))
        # The older names mean the same, on both sides; both names at once is an error.
        self.assertEqual(plan, ag.plan(GPT, PREEMPTED, eval_iterations=2, eval_start=0.5))
        self.assertEqual(plan, cli_json("plan", "--pipeline", GPT, "--network", PREEMPTED, "--eval-iterations", 2,
                                        "--eval-start", 0.5, "--json"))
        with self.assertRaisesRegex(ag.InputError, "give iterations or its older name eval_iterations"):
            ag.plan(GPT, PREEMPTED, iterations=2, eval_iterations=2)
        self.assertEqual(plan["schema"], "adagrouper.plan/2")
        self.assertEqual([i["role"] for i in plan["inputs"]], ["pipeline", "network"])
        self.assertEqual(len(plan["inputs"][0]["sha256"]), 64)

    def test_table_and_options(self):
        plan, table = ag.plan(TOY, TOY_NET_2S, memory_limit=4e9, text=True)
        rc, out, err = cli("plan", "--pipeline", TOY, "--network", TOY_NET_2S, "--memory-limit", 4e9)
        self.assertEqual(rc, 0, err)
        self.assertEqual(table, out)
        self.assertEqual(plan["memory_limit_bytes"], 4e9)

    def test_across_families_on_devices(self):
        toy8 = os.path.join(ROOT, "configs", "examples", "toy-8.json")
        plan = ag.plan(toy8, TOY_NET_2S, memory_limit=1e12, devices=4)
        self.assertEqual(plan, cli_json("plan", "--pipeline", toy8, "--network", TOY_NET_2S, "--memory-limit", 1e12,
                                        "--devices", 4, "--json"))
        self.assertEqual(plan["stages"], 4)
        self.assertIn("zbv", {c["schedule"] for c in plan["candidates"]})
        only = ag.plan(toy8, TOY_NET_2S, memory_limit=1e12, devices=4, families="zbv", virtual_stages="2")
        self.assertEqual(only, cli_json("plan", "--pipeline", toy8, "--network", TOY_NET_2S, "--memory-limit", 1e12,
                                        "--devices", 4, "--families", "zbv", "--virtual-stages", "2", "--json"))
        self.assertEqual({c["schedule"] for c in only["candidates"]}, {"kfkb", "1f1b", "dapple-b", "gpipe", "zbv"})
        for kwargs, args in (({"devices": 3}, ["--devices", 3]), ({"families": "zbx"}, ["--families", "zbx"])):
            with self.assertRaises(ag.InputError) as raised:
                ag.plan(toy8, TOY_NET_2S, memory_limit=1e12, **kwargs)
            self.assertEqual(str(raised.exception), cli_error("plan", "--pipeline", toy8, "--network", TOY_NET_2S,
                                                              "--memory-limit", 1e12, *args))

    def test_rank_by_deployed(self):
        toy8 = os.path.join(ROOT, "configs", "examples", "toy-8.json")
        stepped = os.path.join(ROOT, "configs", "examples", "toy-net-stepped.json")
        plan = ag.plan(toy8, stepped, memory_limit=1e12, devices=4, families="kfkb-dynamic", iterations=4,
                       rank_by="deployed")
        self.assertEqual(plan, cli_json("plan", "--pipeline", toy8, "--network", stepped, "--memory-limit", 1e12,
                                        "--devices", 4, "--families", "kfkb-dynamic", "--iterations", 4,
                                        "--rank-by", "deployed", "--json"))
        self.assertEqual(plan["evaluation"]["rank_by"], "deployed")
        self.assertIn("deployed_iteration_time_s", plan["chosen"])
        with self.assertRaises(ag.InputError) as raised:
            ag.plan(toy8, stepped, memory_limit=1e12, rank_by="fastest")
        self.assertEqual(str(raised.exception), cli_error("plan", "--pipeline", toy8, "--network", stepped,
                                                          "--memory-limit", 1e12, "--rank-by", "fastest"))

    def test_nothing_fits(self):
        with self.assertRaises(ag.InputError) as raised:
            ag.plan(GPT, PREEMPTED, memory_limit=1e9)
        self.assertEqual(str(raised.exception), cli_error("plan", "--pipeline", GPT, "--network", PREEMPTED,
                                                          "--memory-limit", 1e9))


class Schedule(unittest.TestCase):
    def test_orders_and_placement(self):
        for name, args in [("zbv", {}), ("kfkb", {"k": 2}), ("interleaved-1f1b", {"virtual_stages": 2}),
                           ("1f1b", {"split_backward": True, "w_fill": "dynamic"})]:
            with self.subTest(name=name):
                cli_args = ["schedule", name, "--stages", 4, "--micro-batches", 8]
                for key, value in args.items():
                    cli_args += [f"--{key.replace('_', '-')}"] + ([] if value is True else [value])
                self.assertEqual(ag.schedule(name, 4, 8, **args), cli_json(*cli_args, "--format", "json"))
                self.assertEqual(ag.schedule(name, 4, 8, format="grid", **args), cli(*cli_args)[1])
                self.assertEqual(ag.schedule(name, 4, 8, format="torch-csv", **args),
                                 cli(*cli_args, "--format", "torch-csv")[1])
        s = ag.schedule("zbv", 4, 8)
        self.assertEqual(s["placement"], [0, 1, 2, 3, 3, 2, 1, 0])
        self.assertEqual(s["orders"][0][:2], ["0F0", "0F1"])

    def test_errors_and_families(self):
        with self.assertRaises(ag.InputError) as raised:
            ag.schedule("kfkb", 4, 8)
        self.assertEqual(str(raised.exception), cli_error("schedule", "kfkb", "--stages", 4, "--micro-batches", 8))
        names = [f["name"] for f in ag.schedule_families()]
        self.assertIn("kfkb", names)
        self.assertIn("dualpipev", names)


class Traces(unittest.TestCase):
    def test_stats_of_a_file(self):
        t = ag.load_trace(PERIODIC)
        self.assertEqual(t.format, "json")
        self.assertEqual(t.stats(), cli_json("trace", "stats", PERIODIC, "--json"))
        self.assertEqual(t.stats(start_s=2, end_s=30, threshold=1e9),
                         cli_json("trace", "stats", PERIODIC, "--start-s", 2, "--end-s", 30, "--threshold", 1e9,
                                  "--json"))

    def test_patterns_and_csv(self):
        spec = {"pattern": "periodic", "high": 2.8e9, "low": 0.35e9, "period_s": 10, "low_fraction": 0.4}
        t = ag.trace(spec)
        self.assertTrue(t.repeats)
        self.assertEqual(t.repeat_s, 10)
        self.assertEqual((t.times, t.values), ([0, 6], [2.8e9, 0.35e9]))
        self.assertEqual(t.value_at(17), 0.35e9)
        rc, out, err = cli("trace", "synth", "periodic", "--high", 2.8e9, "--low", 0.35e9, "--period-s", 10,
                           "--low-fraction", 0.4)
        self.assertEqual(rc, 0, err)
        self.assertEqual(t.to_csv(), out)
        self.assertEqual(t.to_json()["repeat_s"], 10)
        part = t.slice(5, 12)
        self.assertEqual(part.span_s, 7)
        self.assertEqual(len(part), 3)
        self.assertIn("periodic", [p["name"] for p in ag.patterns()])
        with self.assertRaises(ag.InputError):
            ag.trace({"pattern": "periodic", "high": 1})


if __name__ == "__main__":
    unittest.main()
