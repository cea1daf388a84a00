"""adagrouper.simulate() gives the numbers of `adagrouper simulate --json`, on configs/."""

import json
import os
import tempfile
import unittest

import adagrouper as ag
from support import GPT, PREEMPTED, TOY, TOY_NET_2S, TOY_NET_HALF, cli, cli_json, config


class SimulateLikeTheCli(unittest.TestCase):
    def test_toy_example(self):
        # The worked example: kfkb k = 2 takes 49 s with 2 s messages, 1f1b 65 s.
        s = ag.simulate(TOY, TOY_NET_2S, schedule="kfkb", k=2, micro_batch_size=1)
        self.assertEqual(s["mean_iteration_time_s"], 49.0)
        self.assertEqual(s, cli_json("simulate", "--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "kfkb",
                                     "--k", 2, "--micro-batch-size", 1, "--json"))
        self.assertEqual(ag.simulate(TOY, TOY_NET_2S, micro_batch_size=1)["mean_iteration_time_s"], 65.0)

    def test_gpt_on_the_preempted_network(self):
        for schedule, k, b in [("1f1b", None, 2), ("kfkb", 2, 2), ("kfkb", 4, 1), ("dapple-b", None, 2),
                               ("gpipe", None, 1)]:
            with self.subTest(schedule=schedule, k=k, b=b):
                s = ag.simulate(GPT, PREEMPTED, schedule=schedule, k=k, micro_batch_size=b, iterations=3,
                                start_time=3.7)
                args = ["simulate", "--pipeline", GPT, "--network", PREEMPTED, "--schedule", schedule,
                        "--micro-batch-size", b, "--iterations", 3, "--start-time", 3.7, "--json"]
                if k is not None:
                    args += ["--k", k]
                self.assertEqual(s, cli_json(*args))
                self.assertEqual(len(s["iteration_times_s"]), 3)

    def test_virtual_stages_split_backward_and_w_fill(self):
        s = ag.simulate(GPT, PREEMPTED, schedule="interleaved-1f1b", virtual_stages=2, micro_batch_size=4)
        self.assertEqual(s, cli_json("simulate", "--pipeline", GPT, "--network", PREEMPTED, "--schedule",
                                     "interleaved-1f1b", "--virtual-stages", 2, "--micro-batch-size", 4, "--json"))
        s = ag.simulate(TOY, TOY_NET_HALF, schedule="kfkb", k=2, split_backward=True, w_fill="dynamic",
                        max_pending_w=1, micro_batch_size=1)
        self.assertEqual(s, cli_json("simulate", "--pipeline", TOY, "--network", TOY_NET_HALF, "--schedule", "kfkb",
                                     "--k", 2, "--split-backward", "--w-fill", "dynamic", "--max-pending-w", 1,
                                     "--micro-batch-size", 1, "--json"))

    def test_custom_schedule_file(self):
        order = config("schedules", "toy-4-custom.json")
        s = ag.simulate(TOY, TOY_NET_HALF, schedule_file=order, micro_batch_size=1)
        self.assertEqual(s["schedule"], "custom")
        self.assertEqual(s, cli_json("simulate", "--pipeline", TOY, "--network", TOY_NET_HALF, "--schedule-file",
                                     order, "--micro-batch-size", 1, "--json"))

    def test_stage_and_message_traces(self):
        # On the free network, every message at 0.5 s is the 0.5 s network (41 s), and one
        # op measured 3 s longer on the critical path adds its 3 s.
        with tempfile.TemporaryDirectory() as tmp:
            messages = os.path.join(tmp, "m.csv")
            with open(messages, "w", encoding="utf-8") as f:
                f.write("iteration,stage,micro_batch,phase,latency_s\n")
                for st in range(4):
                    for m in range(8):
                        if st < 3:
                            f.write(f"0,{st},{m},F,0.5\n")
                        if st > 0:
                            f.write(f"0,{st},{m},B,0.5\n")
            stages = os.path.join(tmp, "s.csv")
            with open(stages, "w", encoding="utf-8") as f:
                f.write("iteration,stage,micro_batch,phase,duration_s\n0,1,3,B,5.0\n")
            free = config("examples", "toy-net-free.json")
            s = ag.simulate(TOY, free, micro_batch_size=1, message_trace=messages)
            self.assertEqual(s["mean_iteration_time_s"], 41.0)
            self.assertEqual(s, cli_json("simulate", "--pipeline", TOY, "--network", free, "--micro-batch-size", 1,
                                         "--schedule", "1f1b", "--message-trace", messages, "--json"))
            s = ag.simulate(TOY, free, micro_batch_size=1, stage_trace=stages)
            self.assertEqual(s["mean_iteration_time_s"], 36.0)
            bad = os.path.join(tmp, "bad.csv")
            with open(bad, "w", encoding="utf-8") as f:
                f.write("0,1,3,I,1.0\n")
            with self.assertRaisesRegex(ag.InputError, "bad.csv:1: phase: must be F, B, forward or backward"):
                ag.simulate(TOY, free, micro_batch_size=1, message_trace=bad)

    def test_timeline_is_the_cli_timeline(self):
        s, timeline = ag.simulate(TOY, TOY_NET_2S, schedule="kfkb", k=2, micro_batch_size=1, timeline=True)
        self.assertEqual(s["mean_iteration_time_s"], 49.0)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.json")
            rc, _, err = cli("simulate", "--pipeline", TOY, "--network", TOY_NET_2S, "--schedule", "kfkb", "--k", 2,
                             "--micro-batch-size", 1, "--timeline", path)
            self.assertEqual(rc, 0, err)
            with open(path, encoding="utf-8") as f:
                self.assertEqual(timeline, json.load(f))

    def test_evaluators_agree(self):
        runs = [ag.simulate(GPT, PREEMPTED, schedule="kfkb", k=2, micro_batch_size=2, iterations=2, evaluator=e)
                for e in ("auto", "events", "dataflow")]
        self.assertEqual(runs[0], runs[1])
        self.assertEqual(runs[0], runs[2])
        self.assertEqual([name for name, _ in ag.evaluators()], ["auto", "events", "dataflow"])


class InputsAsObjectsDictsAndPaths(unittest.TestCase):
    def test_the_same_run_from_each_form(self):
        with open(GPT, encoding="utf-8") as f:
            pipeline_doc = json.load(f)
        network_doc = {"latency_s": 30e-6,
                       "default": {"pattern": "periodic", "high": 2.8e9, "low": 0.35e9, "period_s": 10,
                                   "low_fraction": 0.4}}
        p = ag.Pipeline(GPT)
        n = ag.Network(network_doc)
        want = ag.simulate(GPT, PREEMPTED, schedule="kfkb", k=2, micro_batch_size=2, iterations=2)
        for pipeline in (p, pipeline_doc, GPT, ag.load_pipeline(GPT)):
            for network in (n, network_doc, PREEMPTED):
                got = ag.simulate(pipeline, network, schedule="kfkb", k=2, micro_batch_size=2, iterations=2)
                self.assertEqual(got, want)

    def test_pipeline_properties(self):
        p = ag.Pipeline(GPT)
        self.assertEqual(p.num_stages, 8)
        self.assertEqual(p.global_batch_size, 64)
        self.assertEqual(p.memory_limit_bytes, 34359738368)
        self.assertEqual(p.source, GPT)
        self.assertEqual((p.min_micro_batch_size, p.max_micro_batch_size), (1, 8))
        stages = p.stage_params(2)
        self.assertEqual(len(stages), 8)
        self.assertGreater(stages[0]["forward_s"], 0)
        self.assertIn("gpt", repr(p))
        toy = ag.Pipeline({"name": "x", "global_batch_size": 2,
                           "stages": [{"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 2,
                                                    "activation_bytes": 1, "output_bytes": 1}]},
                                      {"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 2,
                                                    "activation_bytes": 1}]}]})
        s = ag.simulate(toy, {"default": {"constant": 1.0}}, micro_batch_size=1)
        self.assertEqual(s["pipeline"], "x")
        self.assertEqual(s["micro_batches"], 2)

    def test_a_token_bucket_gives_idle_channels_a_head_start(self):
        # docs/model.md, "Shaped links": 1-byte messages at 1 byte/s take 1 s; a bucket of
        # half a message takes half of that off every transfer that finds its channel idle.
        toy = {"name": "x", "global_batch_size": 1,
               "stages": [{"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 1,
                                        "activation_bytes": 0, "output_bytes": 1}]},
                          {"profile": [{"micro_batch_size": 1, "forward_s": 1, "backward_s": 1,
                                        "activation_bytes": 0, "output_bytes": 0}]}]}
        plain = ag.simulate(toy, {"default": {"constant": 1.0}}, micro_batch_size=1)
        shaped = ag.Network({"default": {"constant": 1.0}, "burst_bytes": 0.5})
        self.assertEqual(shaped.burst_bytes, 0.5)
        bucket = ag.simulate(toy, shaped, micro_batch_size=1)
        self.assertEqual(plain["total_time_s"], 6.0)  # F0, activation, F1, B1, gradient, B0
        self.assertEqual(bucket["total_time_s"], 5.0)


if __name__ == "__main__":
    unittest.main()
