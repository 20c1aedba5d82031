"""The agent process: wires collectors (receive, decode), the tail sampler and sinks (the store) together.

Only the CLI imports this package, inside its commands: `import ragmon` never pulls the agent's dependencies.
"""
