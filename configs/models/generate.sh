#!/usr/bin/env bash
# Regenerates the shipped layer-level model files (docs/formats.md, "Model file") with
# `adagrouper model`. Run from anywhere after building: configs/models/generate.sh
# (ADAGROUPER=path/to/adagrouper to use another build). Each file records the command
# that wrote it ("generated_by") and where its architecture comes from ("source").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bin=${ADAGROUPER:-build/adagrouper}
out=configs/models

"$bin" model --preset gpt2-xl --device v100-32gb --micro-batch-sizes 1,2,4,8 --output "$out/gpt2-xl.json"
"$bin" model --preset gpt3-2.7b --device v100-32gb --micro-batch-sizes 1,2,4,8 --output "$out/gpt3-2.7b.json"
"$bin" model --preset gpt3-6.7b --device v100-32gb --micro-batch-sizes 1,2,4 --output "$out/gpt3-6.7b.json"
"$bin" model --preset bert-48 --device v100-32gb --micro-batch-sizes 1,2,4,8,16 --output "$out/bert-48.json"
"$bin" model --preset sd-unet --device v100-32gb --micro-batch-sizes 1,2,4,8,16 --output "$out/sd-unet.json"
"$bin" model --preset gnmt-16 --device v100-32gb --micro-batch-sizes 8,16,32,64 --output "$out/gnmt-16.json"
