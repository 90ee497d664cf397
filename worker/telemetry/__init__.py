"""What the worker tells about itself: metrics, traces, the observer hooks, the pool report."""
