// Exit 0 if a MongoDB-wire server answers `hello` on 127.0.0.1:PORT, 1 otherwise.
// Usage: node hello.mjs PORT  (prints the server's version when it answers)
import net from 'node:net';
import { serialize, deserialize } from 'bson';

const OP_MSG = 2013;
const port = Number(process.argv[2] ?? 27017);
const body = serialize({ hello: 1, $db: 'admin' });
const header = Buffer.alloc(21);  // 4 int32 fields, flagBits, section kind 0
header.writeInt32LE(header.length + body.length, 0);
header.writeInt32LE(1, 4);
header.writeInt32LE(OP_MSG, 12);

const socket = net.connect(port, '127.0.0.1');
socket.setTimeout(2000, () => socket.destroy(new Error('no answer within 2 s')));
socket.on('connect', () => socket.write(Buffer.concat([header, body])));
let received = Buffer.alloc(0);
socket.on('data', (chunk) => {
  received = Buffer.concat([received, chunk]);
  if (received.length < 4 || received.length < received.readInt32LE(0)) return;
  const reply = received.readInt32LE(12) === OP_MSG ? deserialize(received.subarray(21)) : {};
  socket.end();
  if (reply.ok !== 1) process.exit(1);
  console.log(`MongoDB wire version ${reply.maxWireVersion}, reports ${reply.version ?? 'no version'}`);
  process.exit(0);
});
socket.on('error', () => process.exit(1));
socket.on('close', () => process.exit(1));  // closed without a whole answer
