// A broker-side recorder of KIP-714 client metrics, for tests/test_telemetry.py.
//
// Enabled with metric.reporters=TelemetryRecorder (and this class on the broker's
// classpath): as a ClientTelemetry plugin it makes the broker offer GetTelemetrySubscriptions
// and PushTelemetry, and each payload the broker accepts is appended to the file named by
// the broker config telemetry.recorder.file as one line:
//   <client instance id> <terminating: true|false> <content type> <payload, base64>
// The payload is the OTLP MetricsData as the broker hands it on (decompressed).

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.metrics.KafkaMetric;
import org.apache.kafka.common.metrics.MetricsReporter;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.telemetry.ClientTelemetry;
import org.apache.kafka.server.telemetry.ClientTelemetryPayload;
import org.apache.kafka.server.telemetry.ClientTelemetryReceiver;

@SuppressWarnings("removal")  // ClientTelemetry: 4.x offers ClientTelemetryExporterProvider too
public class TelemetryRecorder implements MetricsReporter, ClientTelemetry {
    private volatile String path = System.getProperty("telemetry.recorder.file");

    @Override
    public void configure(Map<String, ?> configs) {
        Object configured = configs.get("telemetry.recorder.file");
        if (configured != null) {
            path = configured.toString();
        }
    }

    @Override
    public void init(List<KafkaMetric> metrics) {}

    @Override
    public void metricChange(KafkaMetric metric) {}

    @Override
    public void metricRemoval(KafkaMetric metric) {}

    @Override
    public void close() {}

    @Override
    public ClientTelemetryReceiver clientReceiver() {
        return this::record;
    }

    private synchronized void record(AuthorizableRequestContext context, ClientTelemetryPayload payload) {
        if (path == null) {
            return;
        }
        ByteBuffer data = payload.data().duplicate();
        byte[] bytes = new byte[data.remaining()];
        data.get(bytes);
        String line = payload.clientInstanceId() + " " + payload.isTerminating() + " "
            + payload.contentType() + " " + Base64.getEncoder().encodeToString(bytes) + "\n";
        try (FileOutputStream out = new FileOutputStream(path, true)) {
            out.write(line.getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new RuntimeException("cannot record the pushed metrics in " + path, e);
        }
    }
}
