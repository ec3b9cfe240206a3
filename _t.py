import numpy as np, dask, dask.array as da, sys, time
from mixedcore import layers, models
for pol in ["float32","mixed_bfloat16","mixed_float16"]:
    m = models.Sequential([layers.Input((16,)), layers.Dense(32, activation='relu', dtype=pol), layers.Dense(4, dtype=pol, activation="softmax")])
    m.compile('adam','categorical_crossentropy', metrics=['accuracy'])
    x=np.random.rand(1000,16).astype('float32'); t=np.eye(4)[np.random.randint(0,4,1000)].astype('float32')
    ref=m.predict(x, verbose=0)
    dx=da.from_array(x, chunks=(96,8))
    y=m.predict(dx)
    print(pol, y, y.dtype, ref.dtype, len(y.__dask_graph__()))
    for sch in ["sync","threads"]:
        got=y.compute(scheduler=sch)
        print(sch, np.array_equal(got.view(np.uint8), ref.view(np.uint8)))
    e1=m.evaluate(x,t,verbose=0, batch_size=32); e2=m.evaluate(dx, da.from_array(t, chunks=(96,4)), batch_size=32)
    print(e1,e2)
