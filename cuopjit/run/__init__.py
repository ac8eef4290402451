"""Running plans: Plan and KernelLaunch (a forward as data), prepacked launches, the executor
(with the debug checks)."""
