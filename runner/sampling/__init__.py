"""Samplers: NVML for GPUs, psutil for rank processes."""
