"""How a trainer or evaluator process is started: its command line, and its Kubernetes pod."""
