#!/bin/bash
# Pretrain a recipe on several machines under SLURM: one torchrun launcher per node (one process per GPU), meeting
# through a c10d rendezvous on the job's first node. The recipe's global batch is held whatever the node and GPU
# counts (micro-batch x processes x accumulation, said in one line at the start; docs/pretraining.md, "Several
# processes"), and the job resumes its newest complete checkpoint when requeued, on any count of nodes.
#
#   RECIPE=roberta-base TRAIN_FILE=/shared/corpus OUTPUT_DIR=/shared/runs/roberta-base sbatch examples/slurm_pretrain.sh
#
# It expects: OUTPUT_DIR on a filesystem every node sees (NFS, Lustre, GPFS: rank 0 alone writes, every process
# checks it sees the others' files, node-local folders are refused); the corpus readable from every node; the job's
# python with hf_bertology installed (activate its environment before `srun`); HF_HOME shared, or HF_HUB_OFFLINE=1.
# Extra arguments go to `bertology pretrain` (e.g. --max_steps 1000, --per_device_train_batch_size 32).
#SBATCH --job-name=bertology
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --requeue

set -euo pipefail
RECIPE=${RECIPE:-roberta-base}
TRAIN_FILE=${TRAIN_FILE:?set TRAIN_FILE to the corpus (files, a folder or a glob every node reads)}
OUTPUT_DIR=${OUTPUT_DIR:?set OUTPUT_DIR to a folder on a filesystem every node sees}
GPUS_PER_NODE=${SLURM_GPUS_ON_NODE:-8}
HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=${PORT:-29500}

srun --kill-on-bad-exit=1 python -m torch.distributed.run \
    --nnodes "$SLURM_NNODES" --nproc_per_node "$GPUS_PER_NODE" \
    --rdzv_backend c10d --rdzv_endpoint "$HEAD:$PORT" --rdzv_id "$SLURM_JOB_ID" \
    -m hf_bertology pretrain --recipe "$RECIPE" --train_file "$TRAIN_FILE" --output_dir "$OUTPUT_DIR" \
    --resume_from_checkpoint last "$@"
