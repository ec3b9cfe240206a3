import numpy as np, dask, dask.array as da, sys, time
from mixedcore import layers, models
if __name__ == "__main__":
    from distributed import LocalCluster, Client
    method = sys.argv[1]
    t0=time.time()
    with dask.config.set({"distributed.worker.multiprocessing-method": method}):
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, Client(cl) as c:
            print("start", time.time()-t0)
            m = models.Sequential([layers.Input((16,)), layers.Dense(32, activation='relu', dtype="mixed_bfloat16"), layers.Dense(4)])
            x=np.random.rand(1000,16).astype('float32')
            ref=m.predict(x, verbose=0)
            y=m.predict(da.from_array(x, chunks=100)).compute()
            print(np.array_equal(y.view(np.uint8), ref.view(np.uint8)))
            import mixedcore.scale_out as so
            print(c.run(lambda: (so._unpickled, __import__("mixedcore").kernels.get_num_threads(), __import__("os").environ.get("OMP_NUM_THREADS"))))
            y=m.predict(da.from_array(x, chunks=100)).compute()
            print(c.run(lambda: so._unpickled))
    print("total", time.time()-t0)
