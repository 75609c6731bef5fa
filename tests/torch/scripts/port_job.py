"""Two workers meet on the launcher's port and all-reduce once; rank 0 prints the port."""

import os

import torch

import stint.torch as stint

model = torch.nn.Linear(2, 1)
job = stint.init(model=model)
total = job.all_reduce_mean([torch.tensor(float(lr)) for lr in job.env.logical_ranks])
if job.is_main:
    print(f"port {os.environ['MASTER_PORT']} mean {total.item()}", flush=True)
