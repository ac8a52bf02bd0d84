"""The Java side of the kit's group member: the ``AiozkJavaMember`` program and the log
configuration its process runs with (text only).

:func:`~aiozkconsumer.testing.java_member.build_java_member` compiles :data:`JAVA_SOURCE` once
per ``kafka-clients`` version; the program's arguments, properties file and output lines are
the contract in :mod:`aiozkconsumer.testing._java_member_protocol`, whose Python side must
change with it. Import the public names from :mod:`aiozkconsumer.testing.java_member`.
"""

from __future__ import annotations

__all__ = [
    "JAVA_CLASS",
    "JAVA_SOURCE",
    "LOG4J2_PROPERTIES",
    "LOG4J_PROPERTIES",
]

JAVA_CLASS = "AiozkJavaMember"
"""The main class of the member process (in the default package)."""

JAVA_SOURCE = r"""
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.WakeupException;

/** A consumer group member that reports what it does: one tab-separated line per event. */
public final class AiozkJavaMember {
    private static final PrintStream OUT = new PrintStream(
            new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
    private static final Base64.Encoder B64 = Base64.getEncoder();

    private static synchronized void emit(String line) {
        OUT.print(line);
        OUT.print('\n');
        OUT.flush();
    }

    private static String bytes(byte[] data) {
        return data == null ? "-" : B64.encodeToString(data);
    }

    private static String tps(Collection<TopicPartition> partitions) {
        List<String> names = new ArrayList<>();
        for (TopicPartition tp : partitions) {
            names.add(tp.topic() + ":" + tp.partition());
        }
        return String.join(",", names);
    }

    private static String oneLine(Throwable error) {
        StringBuilder text = new StringBuilder();
        for (Throwable e = error; e != null; e = e.getCause() == e ? null : e.getCause()) {
            if (text.length() > 0) {
                text.append("; caused by ");
            }
            text.append(e.getClass().getName()).append(": ").append(e.getMessage());
        }
        return text.toString().replace('\n', ' ').replace('\t', ' ');
    }

    private static void commit(KafkaConsumer<byte[], byte[]> consumer,
            Map<TopicPartition, OffsetAndMetadata> offsets) {
        if (offsets.isEmpty()) {
            return;
        }
        consumer.commitSync(offsets);
        List<String> entries = new ArrayList<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            entries.add(e.getKey().topic() + ":" + e.getKey().partition() + "="
                    + e.getValue().offset());
        }
        emit("COMMITTED\t" + String.join(",", entries));
    }

    // args: <properties file> <"topics" | "pattern"> <topics, comma-separated | regex>
    //       <commit mode: auto | sync | none> <close timeout, ms> [<poll timeout, ms>]
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        boolean pattern = args[1].equals("pattern");
        String subscription = args[2];
        boolean syncCommits = args[3].equals("sync");
        Duration closeTimeout = Duration.ofMillis(Long.parseLong(args[4]));
        Duration pollTimeout = Duration.ofMillis(args.length > 5 ? Long.parseLong(args[5]) : 1000);

        KafkaConsumer<byte[], byte[]> consumer;
        try {
            consumer = new KafkaConsumer<>(props);
        } catch (Throwable e) {
            emit("ERROR\t" + oneLine(e));
            e.printStackTrace();
            System.exit(1);
            return;
        }
        CountDownLatch closed = new CountDownLatch(1);
        AtomicBoolean stopping = new AtomicBoolean(false);
        Set<TopicPartition> owned = new LinkedHashSet<>();
        // Offsets consumed (next offset to read) and not yet committed: mode "sync" only.
        Map<TopicPartition, OffsetAndMetadata> consumed = new HashMap<>();

        // SIGTERM runs the shutdown hooks: wake the poll so that the main thread commits and
        // closes the consumer (LeaveGroup), and keep the JVM alive until it did.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            consumer.wakeup();
            try {
                closed.await(closeTimeout.toMillis() + 5000, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "aiozk-java-member-shutdown"));

        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            private void report() {
                String generation = "-1";
                String memberId = "";
                try {
                    ConsumerGroupMetadata meta = consumer.groupMetadata();
                    generation = Integer.toString(meta.generationId());
                    memberId = meta.memberId();
                } catch (RuntimeException e) {
                    // not known here: reported as generation -1
                }
                emit("ASSIGNMENT\t" + generation + "\t" + memberId + "\t" + tps(owned));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                if (syncCommits) {
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (TopicPartition tp : partitions) {
                        OffsetAndMetadata offset = consumed.get(tp);
                        if (offset != null) {
                            offsets.put(tp, offset);
                        }
                    }
                    commit(consumer, offsets);
                    consumed.keySet().removeAll(offsets.keySet());
                }
                owned.removeAll(partitions);
                emit("REVOKED\t" + tps(partitions));
                report();
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                owned.addAll(partitions);
                emit("ASSIGNED\t" + tps(partitions));
                report();
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                owned.removeAll(partitions);
                consumed.keySet().removeAll(partitions);
                emit("LOST\t" + tps(partitions));
                report();
            }
        };

        int status = 0;
        try {
            if (pattern) {
                consumer.subscribe(Pattern.compile(subscription), listener);
            } else {
                consumer.subscribe(Arrays.asList(subscription.split(",")), listener);
            }
            emit("STARTED\t" + props.getProperty("client.id", ""));
            while (!stopping.get()) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(pollTimeout);
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    emit("RECORD\t" + r.topic() + "\t" + r.partition() + "\t" + r.offset()
                            + "\t" + r.timestamp() + "\t" + bytes(r.key()) + "\t"
                            + bytes(r.value()));
                    if (syncCommits) {
                        consumed.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    }
                }
                if (!consumed.isEmpty()) {
                    try {
                        commit(consumer, new HashMap<>(consumed));
                        consumed.clear();
                    } catch (RebalanceInProgressException e) {
                        // A cooperative member keeps its partitions while the group
                        // rebalances, and commitSync refuses meanwhile: the offsets stay
                        // in `consumed`, committed after the next poll or on revocation.
                    }
                }
            }
        } catch (WakeupException e) {
            // SIGTERM: commit and close below
        } catch (Throwable e) {
            emit("ERROR\t" + oneLine(e));
            e.printStackTrace();
            status = 1;
        }
        try {
            if (status == 0 && !consumed.isEmpty()) {
                commit(consumer, new HashMap<>(consumed));
            }
        } catch (Throwable e) {
            emit("ERROR\t" + oneLine(e));
            e.printStackTrace();
            status = 1;
        }
        try {
            consumer.close(closeTimeout);
            emit("CLOSED");
        } catch (Throwable e) {
            emit("ERROR\t" + oneLine(e));
            e.printStackTrace();
            status = 1;
        } finally {
            closed.countDown();
        }
        if (status != 0) {
            System.exit(status);
        }
    }
}
"""
"""The member process's Java source (compiled by
:func:`~aiozkconsumer.testing.java_member.build_java_member`)."""

LOG4J_PROPERTIES = """\
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.clients.consumer=INFO
"""
"""The log configuration with Kafka 3.9's jars (reload4j): warnings, and the consumer at INFO,
to stderr."""

# No log4j2 shutdown hook: it would stop logging while the member's own hook still closes
# the consumer (and the consumer's threads would fall back to log4j2's SimpleLogger).
LOG4J2_PROPERTIES = """\
status=warn
shutdownHook=disable
appender.err.type=Console
appender.err.name=STDERR
appender.err.target=SYSTEM_ERR
appender.err.layout.type=PatternLayout
appender.err.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.err.ref=STDERR
logger.consumer.name=org.apache.kafka.clients.consumer
logger.consumer.level=INFO
"""
"""The same with Kafka 4.x's jars (log4j2)."""
