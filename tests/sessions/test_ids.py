import threading

from sessions.ids import is_valid_id, new_id, new_message_id, new_part_id


def test_ids_are_url_safe_and_prefixed():
    message_id = new_message_id()
    assert message_id.startswith("msg_")
    assert len(message_id) == 30
    assert is_valid_id(message_id)


def test_ids_sort_in_creation_order_even_within_a_millisecond():
    ids = [new_part_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ids_from_many_threads_are_unique_and_each_thread_sees_them_increase():
    results: dict[int, list[str]] = {}

    def make(n: int) -> None:
        results[n] = [new_id("x") for _ in range(2000)]

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for ids in results.values() for i in ids]
    assert len(set(everything)) == len(everything)
    for ids in results.values():
        assert ids == sorted(ids)


def test_is_valid_id_rejects_what_is_not_an_id():
    for bad in ("", "a b", "x/y", "é", "a" * 65, "abc\n", None, 12):
        assert not is_valid_id(bad)
