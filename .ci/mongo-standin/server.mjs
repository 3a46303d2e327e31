// adb's MongoDB-wire stand-in: CongoDB, the in-memory server inside
// @push.rocks/smartmongo 2.2.0 (MIT), which .ci/start-mongo unpacks into ./congodb.
// Usage: node server.mjs PORT  (listens on 127.0.0.1 until SIGTERM or SIGINT)
import { CongoServer } from './congodb/index.js';

const port = Number(process.argv[2] ?? 27017);
const server = new CongoServer({ port, host: '127.0.0.1', storage: 'memory' });
await server.start();
console.log(`CongoDB (@push.rocks/smartmongo 2.2.0) listening on 127.0.0.1:${port}`);
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, async () => {
    await server.stop();
    process.exit(0);
  });
}
