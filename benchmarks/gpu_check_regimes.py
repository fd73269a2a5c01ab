from perfctl import Timed, regime


@regime(clock="device", family="kern", params={"size": ["1M", "16M"]}, requires=["gpu"])
def kernel(size):
    """The project's kernel step on float32 vectors, timed with CUDA events."""
    import kern

    from perfctl.regimes.subjects.gpu import open_device

    dev = open_device("cupy")
    n = {"1M": 1 << 20, "16M": 1 << 24}[size]
    step = kern.make(n)

    def run():
        step()
        dev.sync()

    run()
    yield Timed(run, lambda loops: sum(dev.device_times(step, loops)))
    dev.close()
