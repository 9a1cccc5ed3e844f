from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
import time
B = "127.0.0.1:9392"
a = AdminClient({"bootstrap.servers": B})
for f in a.create_topics([NewTopic("out", 1, 1)]).values():
    try:
        f.result()
    except Exception as e:
        print("create:", e)
def committed():
    c = Consumer({"bootstrap.servers": B, "group.id": "weir-sink-x", "enable.auto.commit": False})
    r = c.committed([TopicPartition("out", 0)], timeout=10)
    c.close()
    return r[0].offset
p = Producer({"bootstrap.servers": B, "transactional.id": "weir-sink-x"})
p.init_transactions(10)
c0 = Consumer({"bootstrap.servers": B, "group.id": "weir-sink-x"})
gm = c0.consumer_group_metadata()
p.begin_transaction()
p.produce("out", b"epoch-42")
p.send_offsets_to_transaction([TopicPartition("out", 0, 42)], gm, 10)
p.commit_transaction(10)
print("after commit 42:", committed())
p.begin_transaction()
p.produce("out", b"epoch-50")
p.send_offsets_to_transaction([TopicPartition("out", 0, 50)], gm, 10)
p.flush(10)
print("pending 50 (before commit):", committed())
# simulate crash: a new producer with the same transactional id fences and aborts
p2 = Producer({"bootstrap.servers": B, "transactional.id": "weir-sink-x"})
p2.init_transactions(20)
print("after fencing new producer:", committed())
