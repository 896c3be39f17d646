import asyncio
import gc
import weakref

from apps.proxy.perloop import PerLoop


class Pool:
    pass


def test_each_loop_has_its_own_object_and_a_closed_loop_keeps_none():
    pools = PerLoop(Pool)

    async def twice():
        return pools.get(), pools.get()

    first, again = asyncio.run(twice())
    second, _ = asyncio.run(twice())
    assert first is again
    assert first is not second
    # The last loop's object (a pool of connections) goes with its loop.
    gone = weakref.ref(second)
    del first, again, second, _
    gc.collect()
    assert gone() is None
