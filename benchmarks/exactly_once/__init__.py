"""The exactly-once lab (issue #31): real faults between clients and nginx, the backend's
ledger as the witness, and a scoreboard of what each client told its caller.

One job per module: :mod:`.netlab` (namespace, veth, teardown), :mod:`.servers` (nginx and the
backend in the namespace), :mod:`.backend` (the ledger server), :mod:`.faults` (the seeded
schedule and its injector), :mod:`.workload` (the calls and the loop), :mod:`.peers` (each
client in its own process), :mod:`.records` (the recorded values), :mod:`.checker` (the
judgement, pure), :mod:`.report` (table, JSON, chart), :mod:`.lab` (one run, start to end).
"""
