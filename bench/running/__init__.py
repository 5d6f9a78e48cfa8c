"""Running: the run command, runs here (torchrun, docker), run folders, the training Python, cluster jobs."""
