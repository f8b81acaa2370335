"""Prints the GPUs this worker was given (CUDA_VISIBLE_DEVICES, TF_FORCE_GPU_ALLOW_GROWTH) and, where PyTorch is
installed, how many CUDA devices it sees; with GPU_ENV_OUT set, also writes them to $GPU_ENV_OUT/<worker index>.json.

Run as `tpuctl launch --workers 2 --strategy none tests/integration/scripts/gpu_env.py`: --strategy none imports no
TensorFlow, so it runs on a GPU machine that has only PyTorch."""
import json
import os

seen = {
    "worker": os.environ.get("TPUCTL_WORKER_INDEX"),
    "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "TF_FORCE_GPU_ALLOW_GROWTH": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
}
try:
    import torch
except ImportError:
    pass
else:
    seen["torch_cuda_devices"] = torch.cuda.device_count()
    seen["torch_cuda_names"] = [torch.cuda.get_device_name(i) for i in range(seen["torch_cuda_devices"])]
print("gpu_env " + json.dumps(seen), flush=True)
if os.environ.get("GPU_ENV_OUT"):
    with open(os.path.join(os.environ["GPU_ENV_OUT"], f"{seen['worker']}.json"), "w", encoding="utf-8") as out:
        json.dump(seen, out)
