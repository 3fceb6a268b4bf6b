// One member of a share group for the benchmarks' "share" scenario (benchmarks/share.py):
// the Java client's KafkaShareConsumer with its default options (implicit acknowledgement),
// measured the way the Python members are.
//
//   java -cp <classes>:<kafka libs>/* ShareMember BOOTSTRAP TOPIC GROUP DELAY_MS PREFIX MODE
//
// MODE "count": keeps the System.nanoTime() (CLOCK_MONOTONIC, the clock of Python's
// time.monotonic_ns()) of every record handed over, and writes them at the end to
// PREFIX.times (big-endian int64s). MODE "log": writes "t_ns seq held" per record once it
// is processed to PREFIX.log (seq: the stamped sequence number, -1 if none; held: records
// acquired and not yet processed when it was handed over, this one included: the rest of
// its poll()'s batch). Either way PREFIX.progress holds "count peak_held", rewritten every
// 50 ms. DELAY_MS: the time each record takes to process (a sleep). Stops on a "stop" line
// on stdin (or its end), closes the consumer, and prints "RESULT count peak_held".
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.DataOutputStream;
import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.FileWriter;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class ShareMember {
    private static volatile boolean stop = false;
    private static volatile long count = 0;
    private static volatile long peakHeld = 0;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        long delayMs = Long.parseLong(args[3]);
        String prefix = args[4];
        boolean logMode = args[5].equals("log");

        Thread watcher = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.trim().equals("stop")) break;
                }
            } catch (Exception ignored) {
                // a driver gone is a stop too
            }
            stop = true;
        });
        watcher.setDaemon(true);
        watcher.start();

        Path progress = Path.of(prefix + ".progress");
        Path progressTmp = Path.of(prefix + ".progress.tmp");
        Thread reporter = new Thread(() -> {
            while (true) {
                try {
                    Files.writeString(progressTmp, count + " " + peakHeld + "\n");
                    Files.move(progressTmp, progress, StandardCopyOption.REPLACE_EXISTING,
                            StandardCopyOption.ATOMIC_MOVE);
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    return;
                } catch (Exception ignored) {
                    // the next round writes it again
                }
            }
        });
        reporter.setDaemon(true);
        reporter.start();

        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());

        long[] times = new long[logMode ? 0 : 1 << 16];
        int n = 0;
        BufferedWriter log = logMode ? new BufferedWriter(new FileWriter(prefix + ".log")) : null;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (!stop) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                int batch = records.count();
                int done = 0;
                for (ConsumerRecord<byte[], byte[]> record : records) {
                    long now = System.nanoTime();
                    long held = batch - done;
                    if (held > peakHeld) peakHeld = held;
                    if (logMode) {
                        if (delayMs > 0) Thread.sleep(delayMs);
                        log.write(System.nanoTime() + " " + seq(record.value()) + " " + held + "\n");
                        log.flush();
                    } else {
                        if (n == times.length) times = Arrays.copyOf(times, n * 2);
                        times[n] = now;
                        n++;
                    }
                    done++;
                    count++;
                    if (stop) break;
                }
            }
        }
        if (log != null) log.close();
        if (!logMode) {
            try (DataOutputStream out = new DataOutputStream(
                    new BufferedOutputStream(new FileOutputStream(prefix + ".times"), 1 << 16))) {
                for (int i = 0; i < n; i++) out.writeLong(times[i]);
            }
        }
        System.out.println("RESULT " + count + " " + peakHeld);
        System.out.flush();
    }

    // The sequence number of a benchmarks.clients.common.stamp() value, or -1.
    private static long seq(byte[] value) {
        if (value == null || value.length < 9 || value[0] != (byte) 'L') return -1;
        return ByteBuffer.wrap(value, 1, 8).getLong();
    }
}
